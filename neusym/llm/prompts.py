"""The packaged prompt files' one structure: ``<!-- system -->`` and ``<!-- user -->`` marker lines
start the parts of a chat prompt (``neusym/prompts/*.md``; text before the first marker is a comment)."""

from __future__ import annotations

import re

_SECTION = re.compile(r"^<!--\s*(system|user)\s*-->\s*$", re.MULTILINE | re.IGNORECASE)


def prompt_sections(text: str) -> dict[str, str]:
    """``{"system": ..., "user": ...}`` of a prompt file's text: each part runs from its marker line to
    the next marker (or the end), stripped; keys are lower case, a part without a marker is absent."""
    parts: dict[str, str] = {}
    markers = list(_SECTION.finditer(text))
    for i, marker in enumerate(markers):
        end = markers[i + 1].start() if i + 1 < len(markers) else len(text)
        parts[marker.group(1).lower()] = text[marker.end():end].strip()
    return parts


__all__ = ["prompt_sections"]
