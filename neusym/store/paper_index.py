"""Conference-wide paper search: a paper-level hybrid index (BM25 + all-MiniLM-L6-v2) in Qdrant.

One point per paper in the collection ``papers`` (point id ``uuid5(POINT_NS, "papers:" + paper_id)``),
separate from the per-cell collections of the agent (:mod:`neusym.vectorstore`). Named vectors:

============== ======================= ===========================================================
name           kind                    text
============== ======================= ===========================================================
``bm25``       sparse, IDF modifier    title + abstract + tldr + tags, *paper analyzer* (below)
``bm25_basic`` sparse, IDF modifier    title + abstract, the project analyzer ``encode.bm25_tokens``
                                       (kept for the plain-BM25 / RRF baselines of the benchmark)
``bm25_body``  sparse, IDF modifier    full-text section texts (only papers whose PDF was parsed)
``minilm``     dense 384-d cosine      "title. abstract" (+ tldr), first 256 word pieces
``minilm_title`` dense 384-d cosine    title (+ tags)
``minilm_sents`` multivector, MaxSim   each abstract sentence (+ tldr) on its own
``minilm_body`` multivector, MaxSim    full-text passages (at most :data:`MAX_BODY_PASSAGES`)
============== ======================= ===========================================================

Payload: ``kind="paper"``, ``paper_id``, ``title``, ``venue`` (conference abbreviation, lower case),
``year``, ``authors`` (as written), ``author_keys`` (normalized full names and last names, for the
author filter), ``volume``, ``anthology_id``, ``sentences`` (the snippet source texts, in the order of
the ``minilm_sents`` vectors), ``has_body``.

Search (:meth:`PaperIndex.rank` / :meth:`PaperIndex.search`; :func:`neusym.query.paper_search.search_papers` for the current version): the question's scaffolding ("Is there any paper that", "Which paper
first", "I'm looking for work on" ...) is stripped; each view returns its top :data:`POOL` papers
*with the venue/year/author filter applied inside Qdrant*; per view, the scores of that pool are
z-normalised (papers outside a view's pool get the pool's lowest value) and summed with the weights
of :data:`DEFAULT_WEIGHTS`, chosen on the dev split of ``benchmarks/paper_search``. The snippet is
the abstract sentence (or tldr; the title when there is no abstract) closest to the query in MiniLM
space. Full-text views (``bm25_body``, ``minilm_body``) only score papers whose sections were given.

Query expansion (``expansion=`` of :meth:`PaperIndex.rank` / :meth:`PaperIndex.search`): extra text
that joins the query in every view: its words are added to the sparse (BM25) queries and its vector
to the query's (normalised sum) in the dense views. The accurate mode (:mod:`neusym.query.hyde`:
``neusym search --accurate``, ``GET /search?mode=accurate``) passes a hypothetical title + abstract
written by the configured LLM (HyDE); hits then carry ``default_rank``, their place in the default
ranking.

Keeping it in step with the corpus (:func:`sync_paper_index`): every publish (``neusym ingest``,
``crawl``, ``enrich``, ``publish`` and the DAGs) reads every paper of the new version's database
(:func:`read_paper_docs`: metadata, Anthology id, full-text sections of parsed papers), compares
each paper's content hash (payload ``content_hash``, includes :data:`INDEX_VERSION`) with its point
(copied from the previous version), encodes and upserts only new or changed papers and deletes the
points of papers that left the database.

Storage: the index is the ``papers`` collection of each corpus version
(:mod:`neusym.store.versions`): an embedded qdrant-edge shard ``versions/vNNNNNN/papers/`` (or a
server collection with ``NEUSYM_QDRANT_URL``), built by the publish stage with
:func:`sync_paper_index` and read by any number of processes at once. Segments are not
HNSW-indexed: exact scans of a few thousand papers take milliseconds (``benchmarks/results/paper_search.json``).

Quality and latency: ``benchmarks/paper_search`` (question sets, dev/test splits, how to run) and
``benchmarks/results/paper_search.json``.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
import unicodedata
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from pydantic import BaseModel

from neusym.encode import (
    BM25_B,
    BM25_K1,
    DENSE_DIM,
    DenseEncoder,
    bm25_tokens,
    dense_vectors,
    encode_query,
    paper_text_vectors,
    paper_tokens,
    sparse_doc_vector,
    sparse_query_vector,
    split_sentences,
)
from neusym.ids import POINT_NS, paper_id_for
from neusym.settings import Settings, get_settings
from neusym.store.vectors import Filter, Match, Point, QuerySpec, VectorBackend, VectorSchema

PAPERS_COLLECTION = "papers"
INDEX_VERSION = "3"
POOL = 100
"""Candidates fetched per view before fusion."""
MAX_BODY_PASSAGES = 48
"""Cap on full-text passages per paper in the ``minilm_body`` multivector (bounds encoding time)."""
BODY_PASSAGE_CHARS = 700

AVG_LEN = {"bm25": 129.0, "bm25_basic": 115.0, "bm25_body": 4000.0}
"""BM25 average document lengths in tokens (title+abstract of ACL 2024 + Findings 2024; full text)."""

DEFAULT_WEIGHTS: dict[str, float] = {
    "bm25": 1.0,
    "minilm": 1.0,
    "minilm_title": 0.5,
    "minilm_sents": 0.25,
    "bm25_body": 0.3,
    "minilm_body": 0.3,
}
"""Fusion weights per view (z-score fusion), chosen on the dev split; body weights are a priori."""

SPARSE_VIEWS = ("bm25", "bm25_basic", "bm25_body")
DENSE_VIEWS = ("minilm", "minilm_title")
MULTI_VIEWS = ("minilm_sents", "minilm_body")
BODY_VIEWS = ("bm25_body", "minilm_body")


# ------------------------------------------------------------------------------------------ records
@dataclass
class PaperDoc:
    """What the paper index needs to know about one paper.

    ``paper_id``: the project's paper id (``ids.paper_id_for(title, sha)``; for metadata-only papers
    ``paper_id_for(title, "")``). ``venue``: conference abbreviation (any case, stored lower case).
    ``sections``: full-text section texts when the PDF has been parsed (empty for metadata-only
    papers). ``tldr``/``tags``: optional index-time enrichment.
    """

    paper_id: str
    title: str
    abstract: str | None = None
    venue: str | None = None
    year: int | None = None
    authors: Sequence[str] = ()
    volume: str | None = None
    anthology_id: str | None = None
    tldr: str | None = None
    tags: Sequence[str] = ()
    sections: Sequence[str] = ()

    def content_hash(self, encoder_version: str | None = None) -> str:
        """sha256 hex of everything that goes into this paper's point (texts, filter fields) + INDEX_VERSION
        + ``encoder_version`` (the paper encoder's :attr:`neusym.encode.DenseEncoder.version`; None: the
        packaged model, as before corpus-adapted encoders existed).

        Stored in the point payload as ``content_hash``; :func:`sync_paper_index` re-encodes a paper
        only when it changes, so a new corpus-adapted encoder re-encodes every paper.
        """
        data = [INDEX_VERSION + (f"|{encoder_version}" if encoder_version else ""), self.paper_id, self.title,
                self.abstract, self.venue, self.year, list(self.authors or ()), self.volume, self.anthology_id, self.tldr, list(self.tags or ()),
                list(self.sections or ())]
        return hashlib.sha256(json.dumps(data, ensure_ascii=False, default=str).encode("utf-8")).hexdigest()

    @classmethod
    def from_source(cls, paper: Any, *, sections: Sequence[str] = (), tldr: str | None = None,
                    tags: Sequence[str] = ()) -> "PaperDoc":
        """A metadata-only PaperDoc from a :class:`neusym.ingest.sources.base.SourcePaper` (e.g. ACL Anthology XML).

        The paper id is ``paper_id_for(title, "")``; pass ``sections`` when the full text is known.
        """
        return cls(
            paper_id=paper_id_for(paper.title, ""),
            title=paper.title,
            abstract=paper.abstract,
            venue=(paper.conference_abbreviation or None),
            year=paper.pub_year,
            authors=list(paper.authors or []),
            volume=paper.volume,
            anthology_id=paper.anthology_id,
            tldr=tldr,
            tags=list(tags or paper.keywords or []),
            sections=list(sections),
        )


@dataclass
class PaperHit:
    """One search result: the paper, its fused score (higher is better) and the best-matching sentence.

    ``default_rank`` is set only by the accurate mode (:func:`neusym.query.hyde.accurate_search`): the
    hit's 1-based place in the default mode's ranking of the same query and filters (None there too
    when it is not among that ranking's first :data:`POOL` papers).
    """

    paper_id: str
    title: str
    venue: str | None
    year: int | None
    authors: list[str]
    score: float
    snippet: str
    anthology_id: str | None = None
    volume: str | None = None
    default_rank: int | None = None

    def to_dict(self) -> dict:
        """JSON-ready dict: paper_id, title, venue, year, authors, score, snippet, anthology_id, volume, and
        ``default_rank`` only when it is set (accurate mode)."""
        out = asdict(self)
        if self.default_rank is None:
            out.pop("default_rank")
        return out


@dataclass
class SearchConfig:
    """How a query is scored: weights per view, fusion method, query processing (for ablations).

    ``fusion``: ``"zscore"`` (weighted sum of per-view z-normalised scores) or ``"rrf"`` (weighted
    reciprocal-rank fusion, ``rrf_k``). ``strip_scaffold``: remove question scaffolding before
    encoding. Views with weight 0 are not queried.
    """

    weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    fusion: str = "zscore"
    rrf_k: int = 60
    strip_scaffold: bool = True
    pool: int = POOL


# -------------------------------------------------------------------------------------- text utils
def _sparse_doc(tokens: list[str], avg_len: float) -> tuple[list[int], list[float]]:
    return sparse_doc_vector(tokens, k1=BM25_K1, b=BM25_B, avg_len=avg_len)


_SCAFFOLD = re.compile(
    r"""^\s*(?:
      (?:is|are)\s+there\s+(?:(?:any|an|a|some)\b)?\s*
        (?:(?:recent|existing|prior|published)\s+)?
        (?:(?:papers?|works?|stud(?:y|ies)|research|articles?|publications?|literature)\b)?\s*
        (?:(?:that|which|where|who|on|about|for|in|with)\b)?
    | (?:which|what)\s+(?:papers?|works?|stud(?:y|ies)|research|articles?|publications?|methods?|approach(?:es)?)\b
        (?:\s+(?:first|was\s+the\s+first\s+to|were\s+the\s+first\s+to|has\s+first|have\s+first)\b)?
    | (?:i(?:'m|’m|\s+am)\s+)?(?:looking|searching)\s+for\s+(?:a\s+|an\s+|any\s+|some\s+)?
        (?:(?:papers?|works?|research|stud(?:y|ies)|articles?)\b)?\s*(?:(?:on|about|that|which|where)\b)?
    | (?:has|have)\s+(?:anyone|anybody|someone|researchers|people)\b
    | (?:can|could)\s+you\s+(?:find|recommend|suggest|show)\s+(?:me\s+)?(?:a\s+|the\s+|any\s+|some\s+)?
        (?:(?:papers?|works?|research|stud(?:y|ies))\b)?\s*(?:(?:that|on|about|which|where)\b)?
    | (?:find|show|recommend|suggest)\s+(?:me\s+)?(?:a\s+|the\s+|any\s+|some\s+)?
        (?:papers?|works?|research|stud(?:y|ies))\b\s*(?:(?:that|on|about|which|where)\b)?
    | (?:papers?|works?)\s+(?:on|about|that|which)\b
    )\s*""",
    re.IGNORECASE | re.VERBOSE,
)


def strip_question(query: str) -> str:
    """Remove question scaffolding ("Is there any paper that", "Which paper first", "I'm looking for
    work on", "Has anyone" ...) from the start of a natural-language query; returns the query unchanged
    when nothing (or too little) would remain. Trailing "?" is removed too."""
    q = " ".join((query or "").split())
    rest = _SCAFFOLD.sub("", q, count=1).strip()
    rest = rest.rstrip(" ?")
    return rest if len(rest) >= 8 else q.rstrip(" ?")


def body_passages(sections: Sequence[str], limit: int = MAX_BODY_PASSAGES) -> list[str]:
    """Full-text passages for the ``minilm_body`` view: sentences packed up to ~BODY_PASSAGE_CHARS."""
    out: list[str] = []
    for sec in sections:
        buf = ""
        for s in split_sentences(sec):
            if buf and len(buf) + len(s) > BODY_PASSAGE_CHARS:
                out.append(buf)
                buf = ""
            buf = f"{buf} {s}".strip()
        if buf:
            out.append(buf)
    if len(out) > limit:  # keep an even spread over the paper
        step = len(out) / limit
        out = [out[int(i * step)] for i in range(limit)]
    return out


def normalize_person(name: str) -> str:
    """Lower-case, accent-free form of a person name, words joined by one space ("Liu, Yang" -> "yang liu")."""
    name = name or ""
    if "," in name:
        last, _, first = name.partition(",")
        name = f"{first} {last}"
    text = unicodedata.normalize("NFKD", name)
    text = "".join(ch for ch in text if not unicodedata.combining(ch)).lower()
    return " ".join(re.findall(r"[a-z0-9]+", text))


def author_keys(authors: Iterable[str]) -> list[str]:
    """Filter keys of an author list: each normalized full name, last name and (3+ words) last two words."""
    keys: list[str] = []
    for a in authors:
        norm = normalize_person(a)
        if not norm:
            continue
        words = norm.split()
        for k in (norm, words[-1], " ".join(words[-2:]) if len(words) >= 3 else None):
            if k and k not in keys:
                keys.append(k)
    return keys


def point_id_for_paper(paper_id: str) -> str:
    """Qdrant point id of a paper in the ``papers`` collection: ``uuid5(POINT_NS, "papers:" + paper_id)``."""
    return str(uuid.uuid5(POINT_NS, f"papers:{paper_id}"))


# ---------------------------------------------------------------------------------------- encoding
@dataclass
class _Encoded:
    point_id: str
    vectors: dict[str, Any]
    payload: dict


def _dense(texts: list[str], settings: Settings | None = None, encoder: DenseEncoder | None = None) -> list[list[float]]:
    if not texts:
        return []
    if encoder is not None:
        return encoder.encode(texts).tolist()
    return dense_vectors(texts, settings=settings).tolist()


def _hash_tag(encoder: DenseEncoder | None) -> str | None:
    """What :meth:`PaperDoc.content_hash` mixes in for ``encoder``: its version when corpus-adapted."""
    return encoder.version if encoder is not None and encoder.retriever_id else None


Embedder = Callable[[list[str]], list[list[float]]]
"""Texts -> unit-length 384-d all-MiniLM-L6-v2 vectors (same order)."""


BodyVectors = Callable[[Sequence[str]], "dict[str, list[list[float]]]"]
"""paper ids -> the dense vectors of each paper's full-text chunks (the cell collection's), for ``minilm_body``."""


def encode_papers(papers: Sequence[PaperDoc], *, embed: Embedder | None = None, settings: Settings | None = None,
                  body_vectors: BodyVectors | None = None, encoder: DenseEncoder | None = None) -> list[_Encoded]:
    """Vectors and payloads of papers.

    Default encoder: one pass over each paper's "title. abstract. tldr"
    (:func:`neusym.encode.paper_text_vectors`) gives ``minilm`` and the ``minilm_sents`` sentence
    vectors; titles (+ tags) are encoded on their own; ``minilm_body`` holds the vectors of the
    paper's full-text chunks from ``body_vectors`` (at most :data:`MAX_BODY_PASSAGES`, evenly
    spread), or, without it, of up to that many ~700-character passages of its sections.
    ``embed``: replaces the encoder (texts -> unit 384-d vectors, e.g. a cache in benchmarks and
    tests); every text is then encoded on its own. ``encoder``: the paper encoder of the index
    (default: the settings' encoder) for ``minilm``, ``minilm_title`` and ``minilm_sents``; the
    full-text view ``minilm_body`` always uses the settings' encoder, the one of the cell
    collection whose chunk vectors it reuses.
    """
    dense_jobs: list[tuple[int, str, str]] = []  # (paper index, view, text) for the encoder
    out: list[_Encoded] = []
    prepared = []
    for i, p in enumerate(papers):
        title = " ".join((p.title or "").split())
        abstract = " ".join((p.abstract or "").split())
        tldr = " ".join((p.tldr or "").split())
        tags = [t for t in (p.tags or []) if t]
        sentences = split_sentences(abstract)
        if tldr:
            sentences = sentences + [tldr]
        if not sentences:
            sentences = [title]
        lexical = " ".join(x for x in (title, abstract, tldr, " ".join(tags)) if x)
        vectors: dict[str, Any] = {
            "bm25": _sparse_doc(paper_tokens(lexical), AVG_LEN["bm25"]),
            "bm25_basic": _sparse_doc(bm25_tokens(f"{title}. {abstract}"), AVG_LEN["bm25_basic"]),
        }
        dense_jobs.append((i, "minilm_title", title + (" (" + ", ".join(tags) + ")" if tags else "")))
        if embed is not None:
            dense_jobs.append((i, "minilm", ". ".join(x for x in (title, abstract, tldr) if x)))
            for sentence in sentences:
                dense_jobs.append((i, "minilm_sents", sentence))
        sections = [s for s in (p.sections or []) if s and s.strip()]
        if sections:
            vectors["bm25_body"] = _sparse_doc(paper_tokens(" ".join(sections)), AVG_LEN["bm25_body"])
        authors = [a for a in (p.authors or []) if a]
        payload = {
            "kind": "paper",
            "paper_id": p.paper_id,
            "title": title,
            "venue": (p.venue or "").strip().lower() or None,
            "year": int(p.year) if p.year is not None else None,
            "authors": authors,
            "author_keys": author_keys(authors),
            "volume": p.volume,
            "anthology_id": p.anthology_id,
            "sentences": sentences,
            "has_body": bool(sections),
            "index_version": INDEX_VERSION,
            "content_hash": p.content_hash(_hash_tag(encoder)),
        }
        out.append(_Encoded(point_id_for_paper(p.paper_id), vectors, payload))
        prepared.append((title, abstract, tldr, sections))
    if embed is None:
        for e, ptv in zip(out, paper_text_vectors([(t, a, d) for t, a, d, _ in prepared], settings=settings,
                                                  encoder=encoder)):
            e.vectors["minilm"] = ptv.full
            e.vectors["minilm_sents"] = list(ptv.sentence_vectors)
            e.payload["sentences"] = list(ptv.sentences)
    with_body = [p.paper_id for p, (_, _, _, sec) in zip(papers, prepared) if sec]
    chunk_vecs = body_vectors(with_body) if (body_vectors is not None and with_body and embed is None) else {}
    for i, (p, (_, _, _, sections)) in enumerate(zip(papers, prepared)):
        if not sections:
            continue
        vecs = chunk_vecs.get(p.paper_id) or []
        if vecs:
            if len(vecs) > MAX_BODY_PASSAGES:  # keep an even spread over the paper
                step = len(vecs) / MAX_BODY_PASSAGES
                vecs = [vecs[int(k * step)] for k in range(MAX_BODY_PASSAGES)]
            out[i].vectors["minilm_body"] = [list(v) for v in vecs]
        else:
            for passage in body_passages(sections):
                dense_jobs.append((i, "minilm_body", passage))
    if embed is not None:
        jobs = dense_jobs
        embs = embed([t for _, _, t in jobs])
    else:  # the paper encoder's views, then the full-text passages with the cell encoder
        own = [j for j in dense_jobs if j[1] != "minilm_body"]
        body = [j for j in dense_jobs if j[1] == "minilm_body"]
        jobs = own + body
        embs = _dense([t for *_, t in own], settings, encoder) + _dense([t for *_, t in body], settings)
    for (i, view, _), e in zip(jobs, embs):
        vecs = out[i].vectors
        if view in MULTI_VIEWS:
            vecs.setdefault(view, []).append(e)
        else:
            vecs[view] = e
    return out


# ----------------------------------------------------------------------------------------- filters
@dataclass(frozen=True)
class _FilterSpec:
    venue: str | None = None
    year: int | None = None
    author: str | None = None

    @classmethod
    def make(cls, venue: str | None, year: int | str | None, author: str | None) -> "_FilterSpec":
        v = venue.strip().lower() if isinstance(venue, str) and venue.strip() else None
        if year is not None and not isinstance(year, int):
            try:
                year = int(str(year).strip())
            except ValueError:
                raise ValueError(f"year must be an integer, got {year!r}") from None
        if v is not None and not re.search(r"[a-z0-9]", v):
            raise ValueError(f"venue filter {venue!r} names no venue: wildcards are not supported; give a conference "
                             "abbreviation such as acl or emnlp, or findings")
        a = normalize_person(author) if isinstance(author, str) and author.strip() else None
        if a == "":
            raise ValueError(f"author filter {author!r} has no letters or digits: wildcards are not supported; give "
                             "an author's full name or last name")
        return cls(v, year, a or None)

    def filter(self) -> Filter:
        """The payload filter of this spec."""
        return Filter(must=tuple(Match(k, v) for k, v in self.conditions()))

    def conditions(self) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = [("kind", "paper")]
        if self.venue == "findings":  # Findings volumes carry their conference (acl/naacl/eacl/emnlp) as venue
            out.append(("volume", "findings"))
        elif self.venue:
            out.append(("venue", self.venue))
        if self.year is not None:
            out.append(("year", self.year))
        if self.author:
            out.append(("author_keys", self.author))
        return out


# ------------------------------------------------------------------------------------------- index
PAPER_SCHEMA = VectorSchema(
    dense={"minilm": DENSE_DIM, "minilm_title": DENSE_DIM},
    multi={"minilm_sents": DENSE_DIM, "minilm_body": DENSE_DIM},
    sparse=SPARSE_VIEWS,
    keyword=("kind", "paper_id", "venue", "author_keys", "volume"),
    integer=("year",),
)
"""The paper index collection: exact scans (a few thousand papers take milliseconds; no HNSW build)."""


def _points(encoded: Sequence[_Encoded]) -> list[Point]:
    return [Point(e.point_id, dict(e.vectors), e.payload) for e in encoded]


class PaperIndex:
    """The paper-level index over one collection (:mod:`neusym.store.vectors`): build (upsert) and search.

    ``backend``: the ``papers`` collection of a corpus version (read-only for searching) or a
    writable one being built; ``settings``: the encoder settings (default: the process settings);
    ``encoder``: the paper encoder the collection was built with (default: the settings' encoder;
    a corpus version with a corpus-adapted encoder passes it, see :func:`current_paper_index`).
    Queries are encoded with it, except for the full-text view ``minilm_body`` (cell encoder).
    """

    def __init__(self, backend: VectorBackend, settings: Settings | None = None, encoder: DenseEncoder | None = None):
        self.backend = backend
        self.settings = settings or get_settings()
        self.encoder = encoder
        self._body: bool | None = None

    @classmethod
    def of_version(cls, version: Any, settings: Settings | None = None) -> "PaperIndex":
        """The read-only paper index of an open corpus version (:class:`neusym.store.versions.CorpusVersion`),
        with the encoder its points were made by (the version's corpus-adapted one, if any): the one
        way readers open a published paper index."""
        return cls(version.papers, settings, encoder=version.paper_encoder())

    def has_body(self) -> bool:
        """Whether any indexed paper may have full text: the ``bm25_body``/``minilm_body`` views are
        queried only then, so a metadata-only corpus skips two empty scans per search. Read once
        (one scroll of the ``has_body`` payload) for a read-only (published) collection; a
        collection open for writing may gain full text at any time, so this is True for it.
        (qdrant-edge does not match boolean payload values in filters, hence the scroll.)"""
        if self._body is None:
            if not self.backend.read_only:
                return True
            self._body = self.backend.exists() and any(
                r.payload.get("has_body") for r in self.backend.scroll(payload=["has_body"]))
        return self._body

    @property
    def engine(self) -> str:
        """``"qdrant-edge"`` or ``"qdrant-client"``."""
        return self.backend.engine

    def __enter__(self) -> "PaperIndex":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Flush and release the collection."""
        self.backend.close()

    def count(self) -> int:
        """Number of papers in the index (0 when it does not exist yet)."""
        return self.backend.count(_FilterSpec().filter()) if self.backend.exists() else 0

    # -------------------------------------------------------------------------------- build
    def build(self, papers: Iterable[PaperDoc], *, batch_size: int = 128, progress: Any = None,
              embed: Embedder | None = None) -> dict:
        """Upsert papers (idempotent: one point per paper_id, re-indexing replaces it).

        Returns ``{"papers": n, "with_body": n, "seconds": s}``. Raises ``ValueError`` for a paper
        without paper_id or title. ``progress``, if given, is called with the running count;
        ``embed`` replaces the MiniLM encoder (e.g. a caching one in benchmarks).
        """
        t0 = time.perf_counter()
        self.backend.create(PAPER_SCHEMA)
        n = body = 0
        batch: list[PaperDoc] = []

        def flush_batch() -> None:
            nonlocal n, body
            self.backend.upsert(_points(encode_papers(batch, embed=embed, settings=self.settings, encoder=self.encoder)))
            n += len(batch)
            body += sum(1 for p in batch if p.sections)
            batch.clear()
            if progress:
                progress(n)

        seen: set[str] = set()
        for p in papers:
            if not p.paper_id or not (p.title or "").strip():
                raise ValueError(f"paper without paper_id or title: {p!r:.200}")
            if p.paper_id in seen:  # the last record of a paper id in one build wins
                batch = [b for b in batch if b.paper_id != p.paper_id]
            seen.add(p.paper_id)
            batch.append(p)
            if len(batch) >= batch_size:
                flush_batch()
        if batch:
            flush_batch()
        self.backend.flush()
        return {"papers": n, "with_body": body, "seconds": round(time.perf_counter() - t0, 2)}

    def abstracts(self, paper_ids: Sequence[str]) -> dict[str, str]:
        """paper_id -> abstract text as indexed (the payload ``sentences``: abstract sentences, then
        the tldr; the title for papers without an abstract), for the papers of ``paper_ids`` found in
        the index (unknown ids are left out). One point lookup, no vectors; what the accurate mode
        shows the LLM."""
        if not paper_ids or not self.backend.exists():
            return {}
        recs = self.backend.retrieve([point_id_for_paper(p) for p in paper_ids], payload=["paper_id", "sentences"])
        return {r.payload["paper_id"]: " ".join(r.payload.get("sentences") or [])
                for r in recs if r.payload.get("paper_id")}

    # ------------------------------------------------------------------------------- search
    def search(self, query: str, *, venue: str | None = None, year: int | None = None, author: str | None = None,
               limit: int = 10, config: SearchConfig | None = None, query_vector: list[float] | None = None,
               expansion: str | None = None) -> list[PaperHit]:
        """Hybrid search; see :func:`neusym.query.paper_search.search_papers` and :meth:`rank`.
        ``query_vector`` skips encoding (tests/benchmarks)."""
        ranking = self.rank(query, venue=venue, year=year, author=author, depth=limit, config=config,
                            query_vector=query_vector, expansion=expansion)
        return self.hits(ranking, limit)

    def rank(self, query: str, *, venue: str | None = None, year: int | None = None, author: str | None = None,
             depth: int = 10, config: SearchConfig | None = None,
             query_vector: list[float] | None = None, expansion: str | None = None,
             paper_ids: Sequence[str] | None = None) -> "Ranking":
        """The fused ranking of ``query`` down to ``depth`` papers (point ids and fused scores, best
        first), without reading any paper back: :meth:`hits` turns its head into :class:`PaperHit`.
        Each view is scanned ``max(config.pool, depth)`` deep with the filters applied inside the
        collection. ``query_vector``: the MiniLM vector of the stripped query, when the caller
        already has it. ``expansion``: text that joins the query (e.g. a hypothetical abstract,
        :mod:`neusym.query.hyde`): its words are added to the sparse queries, and its vector, encoded
        by each dense view's encoder, is added to the query's (the sum normalised to unit length).
        ``paper_ids``: rank only these papers (a payload filter inside the collection, like the others;
        an empty sequence ranks nothing).
        Raises ``ValueError`` for an empty query, a non-positive depth, a
        non-integer year, and a venue or author filter without letters or digits (``%``, ``*``:
        wildcards are not supported, and such a filter used to be silently dropped)."""
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError(f"limit must be a positive integer, got {depth!r}")
        cfg = config or SearchConfig()
        spec = _FilterSpec.make(venue, year, author)
        text = strip_question(query) if cfg.strip_scaffold else query.strip()
        extra = " ".join((expansion or "").split())
        if not self.backend.exists():
            return Ranking(text, query_vector, [])
        weights = {k: w for k, w in cfg.weights.items() if w}
        if not self.has_body():
            weights = {k: w for k, w in weights.items() if k not in BODY_VIEWS}
        need_dense = any(v in weights for v in DENSE_VIEWS + MULTI_VIEWS)
        qvec = query_vector if query_vector is not None else (self._encode_query(text) if need_dense else None)
        if qvec is not None and extra:
            qvec = _unit_sum(qvec, self._encode_query(extra))
        body_qvec = qvec
        if "minilm_body" in weights and self.encoder is not None and self.encoder.retriever_id:
            body_qvec = encode_query(text, settings=self.settings)  # the full-text view holds cell-encoder vectors
            if extra:
                body_qvec = _unit_sum(body_qvec, encode_query(extra, settings=self.settings))
        sparse_text = f"{text} {extra}" if extra else text
        requests: list[tuple[str, Any]] = []
        for view in weights:
            if view == "bm25" or view == "bm25_body":
                sv = sparse_query_vector(paper_tokens(sparse_text))
                if sv[0]:
                    requests.append((view, sv))
            elif view == "bm25_basic":
                sv = sparse_query_vector(bm25_tokens(sparse_text))
                if sv[0]:
                    requests.append((view, sv))
            elif view == "minilm_body":
                requests.append((view, [body_qvec]))
            else:
                requests.append((view, [qvec] if view in MULTI_VIEWS else qvec))
        pool = max(cfg.pool, depth)
        flt = spec.filter()
        if paper_ids is not None:
            if not paper_ids:
                return Ranking(text, qvec, [])
            flt = Filter(must=flt.must + (Match("paper_id", any=tuple(dict.fromkeys(paper_ids))),))
        results = self.backend.query([QuerySpec(name, vec, flt, pool, with_payload=False) for name, vec in requests])
        fused = _fuse([(name, [(h.id, h.score) for h in res]) for (name, _), res in zip(requests, results)],
                      weights, cfg, pool)
        return Ranking(text, qvec, sorted(fused.items(), key=lambda kv: -kv[1])[:depth])

    def _encode_query(self, text: str) -> list[float]:
        if self.encoder is not None:
            return self.encoder.encode_query(text)
        return encode_query(text, settings=self.settings)

    def hits(self, ranking: "Ranking", limit: int) -> list[PaperHit]:
        """The first ``limit`` papers of ``ranking`` as :class:`PaperHit` (payload read back, snippet
        chosen with the ranking's query vector; papers no longer in the collection are left out)."""
        top = ranking.scored[:limit]
        if not top:
            return []
        qvec, text = ranking.query_vector, ranking.text
        want_vecs = ["minilm_sents"] if qvec is not None else False
        recs = {r.id: r for r in self.backend.retrieve([pid for pid, _ in top], vectors=want_vecs)}
        hits = []
        for pid, score in top:
            rec = recs.get(pid)
            if rec is None:
                continue
            payload = rec.payload
            hits.append(PaperHit(
                paper_id=payload.get("paper_id"), title=payload.get("title"), venue=payload.get("venue"),
                year=payload.get("year"), authors=list(payload.get("authors") or []), score=round(float(score), 4),
                snippet=_snippet(payload, rec.vectors, qvec, text), anthology_id=payload.get("anthology_id"),
                volume=payload.get("volume"),
            ))
        return hits


@dataclass
class Ranking:
    """One query's fused ranking (:meth:`PaperIndex.rank`): ``text`` (the query with its scaffolding
    stripped, what was encoded and tokenised), ``query_vector`` (its 384-d MiniLM vector; None when
    no dense view was queried) and ``scored``: ``(point id, fused score)`` pairs, best first."""

    text: str
    query_vector: list[float] | None
    scored: list[tuple[str, float]]


def _fuse(results: list[tuple[str, list[tuple[str, float]]]], weights: Mapping[str, float],
          cfg: SearchConfig, pool: int | None = None) -> dict[str, float]:
    """Per-view results -> fused score per point id.

    z-score fusion: each view's pool is z-normalised and papers outside it get the pool's lowest z.
    A sparse or full-text view that returned fewer than ``pool`` papers has no score for the others
    (no shared term / no full text): a virtual 0.0 is added to its statistics and is their score,
    so a view matching a single paper still separates it from the rest.
    """
    pool = pool or cfg.pool
    fused: dict[str, float] = {}
    if cfg.fusion == "rrf":
        for name, res in results:
            w = weights.get(name, 0.0)
            for rank, (pid, _) in enumerate(res):
                fused[pid] = fused.get(pid, 0.0) + w / (cfg.rrf_k + rank + 1)
        return fused
    if cfg.fusion != "zscore":
        raise ValueError(f"unknown fusion {cfg.fusion!r}")
    # a paper's score: sum over views of w * z, where z is the view's floor when the paper is not in
    # its pool = (sum of w * floor over all views) + (sum over the views that have it of w * (z - floor))
    base = 0.0
    for name, res in results:
        if not res:
            continue
        scores = [s for _, s in res]
        if len(res) < pool and (name in SPARSE_VIEWS or name in BODY_VIEWS):
            scores.append(0.0)
        mu = sum(scores) / len(scores)
        sd = math.sqrt(sum((s - mu) ** 2 for s in scores) / len(scores)) or 1.0
        low = min(scores)
        w = weights.get(name, 0.0)
        base += w * (low - mu) / sd
        scale = w / sd
        for pid, s in res:
            fused[pid] = fused.get(pid, 0.0) + scale * (s - low)
    for pid in fused:
        fused[pid] += base
    return fused


def _unit_sum(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """``a + b`` scaled to unit length (``a`` when the sum is the zero vector)."""
    import numpy as np

    v = np.asarray(a, dtype=np.float64) + np.asarray(b, dtype=np.float64)
    norm = float(np.linalg.norm(v))
    return (v / norm).tolist() if norm > 0 else list(a)


def _snippet(payload: dict, vecs: dict, qvec: list[float] | None, text: str) -> str:
    sentences = list(payload.get("sentences") or [])
    if not sentences:
        return payload.get("title") or ""
    sv = vecs.get("minilm_sents") if vecs else None
    if qvec is not None and sv is not None and len(sv) == len(sentences):
        import numpy as np

        best = int(np.argmax(np.asarray(sv, dtype=np.float32) @ np.asarray(qvec, dtype=np.float32)))
        return sentences[best]
    q = set(paper_tokens(text))  # lexical fallback
    return max(sentences, key=lambda s: len(q & set(paper_tokens(s))))


# ------------------------------------------------------------------------------------ module API
_OPEN: dict[str, Any] = {}
_OPEN_LOCK = threading.Lock()


def current_paper_index(settings: Settings | None = None) -> PaperIndex:
    """The paper index of the current corpus version, opened read-only and kept open in this process
    (reopened when a newer version is published). Raises ``neusym.store.versions.NoCorpusVersion``."""
    from neusym.store.versions import open_version

    settings = settings or get_settings()
    key = str(Path(settings.home).resolve())
    with _OPEN_LOCK:
        opened = _OPEN.get(key)
        if opened is not None and not opened[0].is_current():
            opened[0].close()
            opened = None
        if opened is None:
            version = open_version(settings)
            opened = _OPEN[key] = (version, PaperIndex.of_version(version, settings))
        return opened[1]


def close_paper_indexes() -> None:
    """Release the corpus versions opened by :func:`current_paper_index` (and so by
    :func:`neusym.query.paper_search.search_papers`)."""
    with _OPEN_LOCK:
        for version, _index in _OPEN.values():
            version.close()
        _OPEN.clear()


# ------------------------------------------------------------------------------- sync from DuckDB
_NON_BODY_SECTION = re.compile(r"^\s*(?:[A-Z]?\d+(?:\.\d+)*\.?\s+)?(?:references?|bibliography|acknowledge?ments?)\b",
                               re.IGNORECASE)
"""Sections left out of the full-text views: bibliography lists match every query about their cited titles."""


def read_paper_docs(db_path: str | Path) -> list[PaperDoc]:
    """Every paper of a corpus DuckDB file (the published snapshot) as :class:`PaperDoc`, ordered by paper_id.

    Reads ``metadata`` (title, abstract, tldr, tags, ``conference_abbreviation`` as venue, ``pub_year``,
    authors, volume), the ACL Anthology id from ``provenance`` (smallest non-null ``anthology_id`` of
    the paper, when that table exists) and, for papers whose PDF was parsed, the ``sections`` texts in
    reading order (``section_title`` + newline + ``section_content``; References, Bibliography and
    Acknowledgements sections are left out). Papers with an empty title are skipped. Opens the file
    read-only; raises ``FileNotFoundError`` when it does not exist and ``duckdb.Error`` when it is not
    a corpus database.
    """
    from neusym.store.db import connect_plain_readonly

    db_path = Path(db_path)
    if not db_path.is_file():
        raise FileNotFoundError(f"corpus database not found: {db_path}")
    con = connect_plain_readonly(db_path)
    try:
        tables = {t for (t,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        anthology: dict[str, str] = {}
        if "provenance" in tables:
            anthology = dict(con.execute(
                "SELECT ref_paper_id::VARCHAR, min(anthology_id) FROM provenance WHERE anthology_id IS NOT NULL "
                "GROUP BY 1").fetchall())
        sections: dict[str, list[str]] = {}
        if "sections" in tables:
            for pid, title, content in con.execute(
                    "SELECT ref_paper_id::VARCHAR, section_title, section_content FROM sections "
                    "ORDER BY ref_paper_id, ordinal").fetchall():
                if _NON_BODY_SECTION.match(title or "") or not (content or "").strip():
                    continue
                sections.setdefault(pid, []).append(f"{(title or '').strip()}\n{content.strip()}".strip())
        rows = con.execute(
            "SELECT paper_id::VARCHAR, title, abstract, tldr, tags, conference_abbreviation, pub_year, authors, volume "
            "FROM metadata ORDER BY paper_id").fetchall()
    finally:
        con.close()
    docs = []
    for pid, title, abstract, tldr, tags, venue, year, authors, volume in rows:
        if not (title or "").strip():
            continue
        docs.append(PaperDoc(paper_id=pid, title=title, abstract=abstract, venue=venue, year=year,
                             authors=list(authors or []), volume=volume, anthology_id=anthology.get(pid),
                             tldr=tldr, tags=list(tags or []), sections=sections.get(pid, [])))
    return docs


class PaperIndexSyncReport(BaseModel):
    """What :func:`sync_paper_index` changed (small and JSON-ready: travels through Airflow XCom).

    ``added``/``updated``: papers encoded and upserted (new point / changed content hash);
    ``unchanged``: papers whose point already carries the same content hash (nothing encoded);
    ``deleted``: points of papers no longer in the database; ``papers``: papers in the database
    (= points in the index afterwards); ``with_body``: of those, papers indexed with full-text views;
    ``texts_encoded``: MiniLM passes run (0 when nothing changed); ``seconds``: wall time;
    ``source``: the DuckDB file read; ``engine``: ``qdrant-edge`` or ``qdrant-client``.
    """

    added: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0
    papers: int = 0
    with_body: int = 0
    texts_encoded: int = 0
    seconds: float = 0.0
    source: str = ""
    engine: str = ""


def sync_paper_index(settings: Settings | None = None, *, backend: VectorBackend, db_path: Path,
                     embed: Embedder | None = None, body_vectors: BodyVectors | None = None,
                     batch_size: int = 128, encoder: DenseEncoder | None = None) -> PaperIndexSyncReport:
    """Make the paper index ``backend`` hold exactly the papers of the DuckDB file ``db_path``,
    encoding only what changed (called by the publish stage on the new version's copy).

    Reads :func:`read_paper_docs` (metadata-only and parsed papers alike; full-text views for parsed
    ones). Each paper's content hash (:meth:`PaperDoc.content_hash`, includes ``INDEX_VERSION``) is
    compared with the ``content_hash`` payload of its point: new papers are added, changed ones
    re-encoded and upserted, unchanged ones cost nothing, and points of papers no longer in the
    database are deleted. Idempotent: a second call with nothing changed encodes nothing
    (``texts_encoded == 0``). ``embed`` replaces the encoder (tests, benchmark caches);
    ``body_vectors`` gives parsed papers their chunk vectors (the publish stage reads them from the
    new version's cell collection). Cost per new/changed paper with the default encoder: one pass
    over "title. abstract. tldr" and one short title pass (:func:`encode_papers`). ``encoder``: the
    paper encoder (default: the settings' encoder; a corpus-adapted one is part of every paper's
    content hash, so switching encoders re-encodes every paper). Raises ``FileNotFoundError`` for a
    missing ``db_path``.
    """
    t0 = time.perf_counter()
    settings = settings or get_settings()
    docs = read_paper_docs(db_path)
    counted = 0

    def counting_embed(texts: list[str]) -> list[list[float]]:
        nonlocal counted
        counted += len(texts)
        return embed(texts)

    from neusym.encode import get_encoder

    counters = {id(e): e for e in (get_encoder(settings), encoder) if e is not None}
    before = sum(e.texts_encoded for e in counters.values())
    tag = _hash_tag(encoder)

    backend.create(PAPER_SCHEMA)
    stored = {r.id: r.payload.get("content_hash")
              for r in backend.scroll(_FilterSpec().filter(), payload=["paper_id", "content_hash"])}
    report = PaperIndexSyncReport(source=str(db_path), engine=backend.engine, papers=len(docs),
                                  with_body=sum(1 for d in docs if d.sections))
    wanted: set[str] = set()
    todo: list[PaperDoc] = []
    for d in docs:
        pid = point_id_for_paper(d.paper_id)
        wanted.add(pid)
        old = stored.get(pid, "")
        if old and old == d.content_hash(tag):
            report.unchanged += 1
            continue
        todo.append(d)
        if pid in stored:
            report.updated += 1
        else:
            report.added += 1
    stale = [pid for pid in stored if pid not in wanted]
    for start in range(0, len(todo), batch_size):
        backend.upsert(_points(encode_papers(todo[start:start + batch_size], settings=settings,
                                             embed=counting_embed if embed is not None else None,
                                             body_vectors=body_vectors, encoder=encoder)))
    if stale:
        backend.delete(stale)
        report.deleted = len(stale)
    backend.flush()
    report.texts_encoded = counted if embed is not None else sum(e.texts_encoded for e in counters.values()) - before
    report.seconds = round(time.perf_counter() - t0, 3)
    return report


__all__ = [
    "PAPER_SCHEMA",
    "PaperDoc",
    "PaperHit",
    "PaperIndex",
    "PaperIndexSyncReport",
    "SearchConfig",
    "close_paper_indexes",
    "current_paper_index",
    "encode_papers",
    "read_paper_docs",
    "split_sentences",
    "strip_question",
    "sync_paper_index",
]
