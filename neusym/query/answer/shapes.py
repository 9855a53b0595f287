"""Typed answer shapes: what a caller asks an answer to be, without writing an answer-format sentence.

``ask(question, shape=AnswerShape(kind="number", digits=2))`` asks for a number with two decimals;
``AnswerShape.parse("list:2")`` reads the compact form the CLI and the page use. Inside, a shape is
written as the canonical answer-format sentence (:meth:`AnswerShape.format_text`) that the answer
engine's format reading (:func:`neusym.query.answer.answer_format.shape_of`) turns back into exactly
that shape — a test keeps the two in step — so typed callers and AirQA-style question sets (whose
``answer_format`` prose the evaluation passes as it is) are answered by the same code.

Kinds: ``text`` (free text: no JSON type imposed), ``string``, ``integer``, ``number`` (``digits``:
decimals to round to), ``boolean``, ``list`` (``length`` items; ``fields`` names them, e.g. ``["model",
"F1"]``, which also fixes the length).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

KINDS = ("text", "string", "integer", "number", "boolean", "list")
_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}


class AnswerShape(BaseModel):
    """The shape an answer must take (see the module docstring). Invalid combinations raise
    :class:`pydantic.ValidationError` naming the field."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["text", "string", "integer", "number", "boolean", "list"]
    digits: int | None = Field(None, ge=0, le=9, description="number: decimals to round to")
    length: int | None = Field(None, ge=1, le=6, description="list: how many items")
    fields: list[str] | None = Field(None, min_length=1, max_length=6, description="list: the items' names")

    @model_validator(mode="after")
    def _consistent(self) -> "AnswerShape":
        if self.digits is not None and self.kind != "number":
            raise ValueError("digits applies to kind number only")
        if (self.length is not None or self.fields is not None) and self.kind != "list":
            raise ValueError("length and fields apply to kind list only")
        if self.fields is not None:
            if any(not f.strip() or len(f) > 60 or any(ch in f for ch in "[],:\n") for f in self.fields):
                raise ValueError("fields must be short names without brackets, commas or colons")
            if self.length is not None and self.length != len(self.fields):
                raise ValueError(f"length {self.length} does not match the {len(self.fields)} fields")
        return self

    @classmethod
    def parse(cls, text: str) -> "AnswerShape":
        """The compact form: ``text``, ``string``, ``integer``, ``number`` or ``number:2`` (decimals),
        ``boolean``, ``list``, ``list:2`` (length) or ``list:model,F1`` (named items). Raises ValueError
        (a :class:`pydantic.ValidationError` for bad values) naming what is wrong."""
        kind, _, arg = (text or "").strip().partition(":")
        kind = kind.strip().lower()
        if kind not in KINDS:
            raise ValueError(f"unknown answer shape {kind!r}; the shapes are {', '.join(KINDS)}")
        arg = arg.strip()
        if not arg:
            return cls(kind=kind)
        if kind == "number":
            if not arg.isdigit():
                raise ValueError(f"number:{arg}: the decimals must be a whole number")
            return cls(kind=kind, digits=int(arg))
        if kind == "list":
            if arg.isdigit():
                return cls(kind=kind, length=int(arg))
            return cls(kind=kind, fields=[f.strip() for f in arg.split(",")])
        raise ValueError(f"{kind} takes no argument (got {arg!r})")

    def compact(self) -> str:
        """The compact form :meth:`parse` reads."""
        if self.kind == "number" and self.digits is not None:
            return f"number:{self.digits}"
        if self.kind == "list" and self.fields:
            return "list:" + ",".join(self.fields)
        if self.kind == "list" and self.length:
            return f"list:{self.length}"
        return self.kind

    def format_text(self) -> str | None:
        """The canonical answer-format sentence of this shape (None for ``text``: no format)."""
        if self.kind == "text":
            return None
        if self.kind == "string":
            return "Your answer should be a string."
        if self.kind == "integer":
            return "Your answer should be a single integer."
        if self.kind == "boolean":
            return "Your answer should be a Python boolean, True or False."
        if self.kind == "number":
            if self.digits is None:
                return "Your answer should be a single float."
            return f"Your answer should be a float rounded to {self.digits} decimal places."
        n = len(self.fields) if self.fields else self.length
        if n is None:
            return "Your answer should be a Python list."
        head = f"Your answer should be a Python list of {_WORDS[n]} elements"
        return head + (": [" + ", ".join(self.fields) + "]." if self.fields else ".")


__all__ = ["KINDS", "AnswerShape"]
