"""Damaged copies of real PDFs, built the way files get damaged (used by tests and benchmarks/bad_input_fuzz.py)."""

from __future__ import annotations

from pathlib import Path

import pymupdf


def zeroed(data: bytes, offset: int, size: int = 20_000) -> bytes:
    """``data`` with ``size`` bytes from ``offset`` set to zero (a damaged disk block or download)."""
    out = bytearray(data)
    out[offset:offset + size] = bytes(size)
    return bytes(out)


def without_pages(src: Path, keep: int) -> bytes:
    """The PDF at ``src`` cut to its first ``keep`` pages (a partial copy that is still a valid PDF)."""
    doc = pymupdf.open(src)
    doc.select(list(range(keep)))
    try:
        return doc.tobytes()
    finally:
        doc.close()


def without_title(src: Path) -> bytes:
    """The PDF at ``src`` with its title line (the largest text on page 1) redacted, as a damaged header
    would lose it."""
    doc = pymupdf.open(src)
    try:
        page = doc[0]
        biggest = max((s for b in page.get_text("dict")["blocks"] for ln in b.get("lines", []) for s in ln["spans"]),
                      key=lambda s: s["size"])
        for rect in page.search_for(biggest["text"].strip()[:30]):
            page.add_redact_annot(pymupdf.Rect(0, rect.y0 - 2, page.rect.width, rect.y1 + 30))
        page.apply_redactions()
        return doc.tobytes()
    finally:
        doc.close()
