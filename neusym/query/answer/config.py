"""The focused route's configuration: how evidence is retrieved, fused, cut and turned into a table query.

One typed, frozen object (:class:`FocusedConfig`) with the shipped values as its defaults. A caller
that wants another variant — a benchmark measuring six excerpts instead of four, say — builds one
(``FocusedConfig(evidence_items=6)``, or from JSON with :meth:`FocusedConfig.model_validate_json`) and
passes it in: ``neusym.query.ask.ask(..., focused=config)``, ``neusym eval run --focused JSON``, or
:func:`using` around a direct call of the route's functions. Nothing patches module globals.

The configuration of the call in progress is held in a :class:`contextvars.ContextVar`, so threads
answering side by side (``neusym eval run --concurrency``, the service) each see their own; the route's
functions read it with :func:`current`. Why each default is what it is, and what the other values gave,
is measured in ``benchmarks/results/`` (files named beside each field).
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field


class FocusedConfig(BaseModel):
    """Tunable parts of the focused route (``neusym.query.answer.focused``) and its table query
    (``neusym.query.answer.table_query``). Unknown fields and out-of-range values raise
    :class:`pydantic.ValidationError` naming the field."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    list_hits: int = Field(6, ge=1, le=100, description="hits of each retrieval list the fusion ranks")
    rrf_k: int = Field(60, ge=1, description="the k of reciprocal-rank fusion: 1 / (k + rank)")
    dense_list_weight: float = Field(
        0.5, ge=0, description="weight of a MiniLM list against its view's BM25 list (evidence_fusion.json)")
    off_modality_weight: float = Field(
        0.35, ge=0, description="weight of a table/figure/formula view the question does not name")
    evidence_items: int = Field(4, ge=1, le=20, description="cells kept for a one-paper question (evidence_items_k6.json)")
    evidence_chars: int = Field(900, ge=100, description="a text excerpt cut to this many characters (evidence_chars.json)")
    element_evidence_chars: int = Field(2000, ge=100, description="a table or figure excerpt cut to this many characters")
    evidence_per_paper: int = Field(3, ge=1, le=20, description="cells of each paper of a several-paper question")
    max_focused_papers: int = Field(3, ge=1, le=10, description="papers a several-paper question reads at most")
    front_matter: bool = Field(True, description="several-paper questions also read each paper's front matter (front_matter.json)")
    front_matter_chars: int = Field(1000, ge=100, description="page 1 up to the abstract heading, cut to this many characters")
    table_from_text: bool = Field(
        True, description="an excerpt that reads a stored table's body gives its place to that table (table_from_text.json)")
    table_text_density: float = Field(0.1, ge=0, le=1, description="share of an excerpt's tokens that are numbers, at least")
    table_text_share: float = Field(0.3, ge=0, le=1, description="share of decimals an excerpt and a table have in common, at least")
    table_candidates: int = Field(3, ge=0, description="best-ranked tables among which one named by the question is added")
    named_table_words: int = Field(2, ge=1, description="distinct words a question shares with a table's rows and columns")
    table_query_gate: Literal["top", "any", "anysoft"] = Field(
        "top", description="when a table among the evidence is queried (table_query_gate.json)")
    table_form: Literal["wide", "cells"] = Field(
        "wide", description="how the queried table is shown to the model (table_wide_form.json)")


SHIPPED = FocusedConfig()
_CURRENT: contextvars.ContextVar[FocusedConfig] = contextvars.ContextVar("neusym_focused_config", default=SHIPPED)


def current() -> FocusedConfig:
    """The configuration of the answer being computed in this thread or task (:data:`SHIPPED` outside
    :func:`using`)."""
    return _CURRENT.get()


@contextlib.contextmanager
def using(config: FocusedConfig | None) -> Iterator[FocusedConfig]:
    """Answer with ``config`` (``None``: the one in effect) inside the block; restores the previous one
    on exit, exceptions included. Raises TypeError for anything but a :class:`FocusedConfig`."""
    if config is None:
        yield current()
        return
    if not isinstance(config, FocusedConfig):
        raise TypeError(f"expected a FocusedConfig, got {type(config).__name__}")
    token = _CURRENT.set(config)
    try:
        yield config
    finally:
        _CURRENT.reset(token)


__all__ = ["FocusedConfig", "SHIPPED", "current", "using"]
