"""Linear-time scans of query text shared by the SQL surface and the vector-filter parser."""

from __future__ import annotations


def bracket_depth(text: str) -> tuple[int, int]:
    """(deepest nesting of ``(``, ``[``, ``{``, character offset where it is first reached) of ``text``.

    Callers blank quoted strings and comments first (keeping offsets). An unmatched closing bracket
    is ignored (the parsers report it). No recursion, so it is safe on hostile input.
    """
    depth = deepest = where = 0
    for i, c in enumerate(text):
        if c in "([{":
            depth += 1
            if depth > deepest:
                deepest, where = depth, i
        elif c in ")]}":
            depth = max(0, depth - 1)
    return deepest, where
