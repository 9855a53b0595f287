"""The ``mineru`` parse backend: tables, figures and equations from MinerU's output.

MinerU (the parser the NeuSym-RAG paper uses) is not a dependency of this project: it pins
versions that conflict with ours, so it runs in its own environment, usually as its local server
(``mineru server start``; MinerU 4.x, ``--tier flash`` works offline, higher tiers need its
downloaded models). This backend only reads what MinerU wrote:

- **Where**: MinerU's document library stores each parse under the PDF's sha256:
  ``<mineru_output_dir>/<sha[:2]>/<sha>/<tier>/<first>-<last>_<stamp>.json`` (``~/.mineru/doclib/parsed``
  for a local server), one file per page range. With ``settings.mineru_command`` set (e.g.
  ``"mineru"``), a PDF that has no output yet is first parsed with
  ``<command> parse <pdf> --tier <tier> --pages all`` (the CLI talks to its configured server).
- **Format**: ``docvortex.middle`` 2.x JSON: ``pages[].blocks[]`` with ``type`` (``table``,
  ``image``, ``equation``, ``text``, ``paragraph_title``...), ``bbox`` as fractions of the page
  ``[x0, y0, x1, y1]`` (top-left origin; page sizes in points under
  ``extensions.docvortex_layout.pages``), and sub-blocks ``table_body`` (HTML, or plain text for
  tables the flash tier cannot structure), ``table_caption``, ``image_body``, ``image_caption``.
  Other formats raise :class:`MineruFormatError`.

Merging with the PyMuPDF parse (text, sections, captions and references stay PyMuPDF's, so the
records have the same shape and ids whatever the backend):

- a MinerU table/figure whose caption starts with the label of a PyMuPDF caption ("Table 2")
  gives that float its region (the body's box, in points) and, for tables, its HTML; plain-text
  table bodies keep PyMuPDF's cells;
- MinerU tables/figures with a label PyMuPDF did not find are added (caption text from MinerU);
  PyMuPDF floats MinerU missed keep their PyMuPDF region and cells;
- an equation block overlapping a PyMuPDF numbered equation widens its region (and gives its
  LaTeX when MinerU wrote one); other equation blocks are added as display equations with the
  LaTeX, or the PDF text lines inside the box, and the "(N)" number printed with it if any
  (:func:`neusym.ingest.parse.layout.display_in_box`).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

from neusym.errors import NeusymError
from neusym.ingest.parse.elements import EquationDraft
from neusym.ingest.parse.layout import display_in_box, display_lines_box
from neusym.ingest.parse.pdf import Box, OpenedPDF, union


class MineruUnavailable(NeusymError):
    """No MinerU output for a PDF and no way to make it (or the MinerU run failed)."""


class MineruFormatError(NeusymError):
    """A MinerU output file in a format this backend does not read."""


def output_files(root: Path, sha256: str, tier: str) -> list[Path]:
    """MinerU output files of one PDF (by its sha256 hex digest) and tier, oldest first (by the
    stamp in their names, not file times, which a git checkout resets)."""
    folder = Path(root) / sha256[:2] / sha256 / tier
    files = [p for p in folder.glob("*.json") if p.is_file()] if folder.is_dir() else []
    return sorted(files, key=_stamp)


def _stamp(path: Path) -> tuple[int, str]:
    """Write order of a MinerU output file: the millisecond stamp ending its name (``1-10_<ms>.json``)."""
    tail = path.stem.rsplit("_", 1)[-1]
    return (int(tail) if tail.isdigit() else 0, path.name)


def load_pages(files: list[Path]) -> dict[int, dict]:
    """Merge MinerU output files into ``{page_number (from 1): {"width", "height", "blocks"}}``.

    Later files win for pages present in several. Raises :class:`MineruFormatError` naming the
    file for JSON that is not ``docvortex.middle`` 2.x.
    """
    pages: dict[int, dict] = {}
    for path in files:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise MineruFormatError(f"{path}: not readable MinerU JSON: {exc}") from exc
        schema, version = data.get("schema"), str(data.get("schema_version", ""))
        if schema != "docvortex.middle" or not version.startswith("2"):
            raise MineruFormatError(f"{path}: unsupported MinerU output schema {schema!r} {version!r} (expected docvortex.middle 2.x)")
        sizes = {
            int(p["page_idx"]): (float(p["width_pt"]), float(p["height_pt"]))
            for p in data.get("extensions", {}).get("docvortex_layout", {}).get("pages", [])
        }
        for page in data.get("pages", []):
            idx = int(page["page_idx"])
            if idx not in sizes:
                raise MineruFormatError(f"{path}: page {idx} has no size in extensions.docvortex_layout")
            w, h = sizes[idx]
            pages[idx + 1] = {"width": w, "height": h, "blocks": page.get("blocks", [])}
    return pages


def run_mineru(command: str, pdf: Path, tier: str, timeout_s: float) -> None:
    """Parse ``pdf`` with the MinerU CLI (``<command> parse PDF --tier T --pages all``), waiting for
    the result. Raises :class:`MineruUnavailable` naming the PDF when the command is missing,
    fails or times out."""
    args = [*command.split(), "parse", str(pdf), "--tier", tier, "--pages", "all", "--wait", str(int(timeout_s)),
            "--no-marker", "--limit", "1"]
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s + 30)
    except FileNotFoundError as exc:
        raise MineruUnavailable(f"{pdf}: MinerU command {command!r} not found") from exc
    except subprocess.TimeoutExpired as exc:
        raise MineruUnavailable(f"{pdf}: MinerU did not finish within {timeout_s:.0f} s") from exc
    if done.returncode != 0:
        tail = " ".join((done.stderr or done.stdout or "").split())[-300:]
        raise MineruUnavailable(f"{pdf}: MinerU exited with {done.returncode}: {tail}")


def mineru_pages(opened: OpenedPDF, settings) -> dict[int, dict]:
    """MinerU's pages for this PDF (see :func:`load_pages`), running MinerU first when
    ``settings.mineru_command`` is set and no output exists. Raises :class:`MineruUnavailable`."""
    root = settings.mineru_output_dir
    if root is None:
        raise MineruUnavailable(f"{opened.path}: parse_backend is 'mineru' but mineru_output_dir is not set")
    files = output_files(root, opened.sha256, settings.mineru_tier)
    if not files and settings.mineru_command:
        run_mineru(settings.mineru_command, opened.path, settings.mineru_tier, settings.mineru_timeout_s)
        files = output_files(root, opened.sha256, settings.mineru_tier)
    if not files:
        raise MineruUnavailable(
            f"{opened.path}: no MinerU {settings.mineru_tier} output under {root} for sha256 {opened.sha256}"
        )
    return load_pages(files)


# ---------------------------------------------------------------------------------- conversion

_LABEL = re.compile(r"^\s*(?P<label>Table|TABLE|Tab\.|Figure|FIGURE|Fig\.|FIG\.)\s*(?P<num>(?:[A-Z]\.?)?\d{1,3})")


def _text(content) -> str:
    """Plain text of a MinerU content value (a string or a list of styled runs)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_text(c.get("content", "")) if isinstance(c, dict) else str(c) for c in content)
    return ""


def _points(frac: list[float], width: float, height: float) -> Box:
    x0, y0, x1, y1 = (float(v) for v in frac)
    return (x0 * width, y0 * height, x1 * width, y1 * height)


def mineru_elements(pages: dict[int, dict]) -> tuple[list[dict], list[dict]]:
    """Floats and equations of MinerU's pages, boxes in PDF points.

    Floats: ``{"kind", "label" ("Table 2" or None), "page", "caption", "bbox", "html"}``;
    equations: ``{"page", "bbox", "latex"}``.
    """
    floats: list[dict] = []
    equations: list[dict] = []
    for number in sorted(pages):
        page = pages[number]
        w, h = page["width"], page["height"]
        for block in page["blocks"]:
            kind = block.get("type")
            if kind in ("table", "image"):
                parts = block.get("content") if isinstance(block.get("content"), list) else []
                body = next((p for p in parts if isinstance(p, dict) and p.get("type") in ("table_body", "image_body")), None)
                caption = " ".join(
                    _text(p.get("content")) for p in parts if isinstance(p, dict) and p.get("type") in ("table_caption", "image_caption")
                )
                caption = " ".join(caption.split())
                m = _LABEL.match(caption)
                label = None
                if m:
                    label = ("Table " if m.group("label").lower().startswith("tab") else "Figure ") + m.group("num")
                bbox = _points((body or block)["bbox"], w, h)
                html = None
                if body is not None and kind == "table":
                    text = _text(body.get("content")).strip()
                    html = text if text.startswith("<table") else None
                floats.append({"kind": "table" if kind == "table" else "figure", "label": label, "page": number,
                               "caption": caption, "bbox": bbox, "html": html})
            elif kind in ("equation", "interline_equation"):
                equations.append({"page": number, "bbox": _points(block["bbox"], w, h), "latex": _text(block.get("content")).strip()})
    return floats, equations


def _overlap(a: Box, b: Box) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    hh = min(a[3], b[3]) - max(a[1], b[1])
    return w * hh if w > 0 and hh > 0 else 0.0


def _area(a: Box) -> float:
    return max(0.0, a[2] - a[0]) * max(0.0, a[3] - a[1])


def refine_with_mineru(opened: OpenedPDF, floats: list, equations: list[EquationDraft], settings, *, timings: dict | None = None):
    """Merge MinerU's tables, figures and equations into PyMuPDF's (module docstring).

    ``floats`` are :class:`neusym.ingest.parse.FloatDraft` (changed in place, MinerU-only ones appended);
    returns ``(floats, equations)``. ``timings`` gets the seconds spent reading (and running)
    MinerU under ``mineru``. Raises :class:`MineruUnavailable` / :class:`MineruFormatError`.
    """
    from neusym.ingest.parse import FloatDraft

    tick = time.perf_counter()
    pages = mineru_pages(opened, settings)
    m_floats, m_eqs = mineru_elements(pages)
    if timings is not None:
        timings["mineru"] = timings.get("mineru", 0.0) + time.perf_counter() - tick
    by_label = {(f.kind, f.label): f for f in floats}
    for mf in m_floats:
        ours = by_label.get((mf["kind"], mf["label"])) if mf["label"] else None
        if ours is not None:
            ours.bbox = mf["bbox"]
            if mf["html"]:
                ours.html = mf["html"]
                ours.source = "mineru"
        elif mf["label"] and 1 <= mf["page"] <= len(opened.pages):
            new = FloatDraft(kind=mf["kind"], label=mf["label"], page=mf["page"], caption=mf["caption"],
                             bbox=mf["bbox"], html=mf["html"], source="mineru" if mf["html"] else None)
            floats.append(new)
            by_label[(new.kind, new.label)] = new
    out = list(equations)
    for me in m_eqs:
        if not 1 <= me["page"] <= len(opened.pages):
            continue
        page = opened.pages[me["page"] - 1]
        box = me["bbox"]
        hit = [e for e in out if e.page is page and _overlap(e.bbox, box) > 0.3 * min(_area(box), _area(e.bbox))]
        if hit:
            trimmed = display_lines_box(page, box)
            for e in hit:
                if trimmed is not None and len(hit) == 1:  # one box over several numbers: ambiguous
                    e.bbox = union([e.bbox, trimmed])
                if me["latex"]:
                    e.text = me["latex"]
            continue
        draft = display_in_box(page, box, latex=me["latex"] or None)
        if draft is not None and not any(e.page is page and _overlap(e.bbox, draft.bbox) > 0 for e in out):
            out.append(draft)
    return floats, out


__all__ = [
    "MineruFormatError",
    "MineruUnavailable",
    "load_pages",
    "mineru_elements",
    "mineru_pages",
    "output_files",
    "refine_with_mineru",
    "run_mineru",
]
