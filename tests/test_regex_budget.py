"""No regular expression of the package takes super-linear time on text built to make it backtrack.

Every pattern (literals passed to ``re`` functions and compiled module patterns, cues included;
``tests/regex_inventory.py``) runs over ~50 adversarial inputs of 16,384 characters in worker
processes. A linear pattern takes about a millisecond there; a quadratic one (``\\s*`` at every start
of a long blank run, as the chat history's reference-line pattern was: 0.8 s on 16k newlines, about an
hour on a 1 MiB body) takes tenths of seconds to seconds, a cubic one minutes. 16k rather than 1 MiB
keeps the scan under a minute; the 1 MiB chat body is tested end to end in ``test_service_attack.py``.
"""

from __future__ import annotations

import re

from .regex_inventory import Found, measure, patterns, worst_seconds

BUDGET_S = 0.05
"""Slowest input allowed per pattern at 16,384 characters."""


def test_the_inventory_finds_the_patterns_that_reach_user_text():
    found = {f.where for f in patterns()}
    assert "neusym.interfaces.service.openai_compat._REFERENCE_LINE" in found  # the chat history (X1)
    assert "neusym.query.sqlsafe._IMPORT_RE" in found  # user SQL
    assert any(w.startswith("neusym.query.answer.cues.CUES") for w in found)  # cues read the question
    assert len(found) > 150


def test_the_scan_flags_a_quadratic_and_a_cubic_pattern():
    """The measurement itself: the old reference-line pattern and the old acronym-plural pattern are slow."""
    uuid = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    old_reference = Found(rf"^\s*\[\d+\][^\n]*\(paper ({uuid})\)\s*$", re.MULTILINE, "old reference line", "scan")
    assert worst_seconds(old_reference)[0] > BUDGET_S
    cubic = Found(r"[A-Z][A-Za-z0-9]*[A-Z][A-Za-z0-9]*s", 0, "old acronym plural", "anchored")
    ((_, seconds, _),) = measure([cubic], timeout_s=5)
    assert seconds > BUDGET_S


def test_every_pattern_is_linear_on_adversarial_text():
    slow = [(f.where, f.pattern[:80], round(s, 3), head) for f, s, head in measure(patterns()) if s >= BUDGET_S]
    assert not slow, f"patterns slower than {BUDGET_S} s on 16k adversarial characters: {slow}"
