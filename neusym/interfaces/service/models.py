"""Request and response models of the HTTP API (they make its OpenAPI schema)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class Health(BaseModel):
    """``GET /healthz``: the corpus version being served."""

    status: Literal["ok"] = "ok"
    version: int = Field(description="The corpus version answering requests (versions/vNNNNNN).")
    papers: int = Field(description="Papers (rows of metadata) in that version.")
    published_at: str | None = Field(None, description="When the version was published (UTC, ISO 8601).")
    opened_at: float = Field(description="When this process opened it (UNIX time).")
    switches: int = Field(description="Versions switched to since the process started.")
    uptime_s: float
    neusym: str = Field(description="The neusym package version.")
    process: int | None = Field(None, description="Id of the server process that answered (`neusym serve --workers N` "
                                "runs N); only for callers with a valid API key, or when the service has none.")


class HitRerank(BaseModel):
    """How ``mode=accurate`` placed one hit (:class:`neusym.store.paper_index.RerankInfo`)."""

    applied: bool = Field(description="The LLM's order was used (false: LLM failed or its reply was unusable, "
                          "fused order kept).")
    fused_rank: int = Field(description="1-based position in the default (fused) ranking.")
    llm_rank: int | None = Field(None, description="1-based position the LLM gave the paper (null: not named by it "
                                 "or not among the reranked candidates).")
    top_n: int = Field(description="Fused hits sent to the LLM.")
    note: str | None = Field(None, description="Why the fused order was kept, when it was.")


class SearchHit(BaseModel):
    """One paper of ``GET /search``."""

    rank: int = Field(description="1 = best.")
    paper_id: str
    title: str
    venue: str | None = Field(None, description="Conference abbreviation, lower case (e.g. acl, emnlp).")
    year: int | None = None
    authors: list[str] = []
    score: float = Field(description="Fused hybrid score (weighted sum of per-view z-scores; comparable within "
                         "one query only).")
    snippet: str = Field(description="The abstract sentence (or TL;DR, or title) closest to the query.")
    anthology_id: str | None = None
    volume: str | None = None
    rerank: HitRerank | None = Field(None, description="Only with mode=accurate: how the LLM rerank placed the hit.")


class SearchRerank(BaseModel):
    """``GET /search?mode=accurate``: what the LLM rerank did for this query."""

    applied: bool
    note: str | None = None
    top_n: int
    llm_seconds: float = Field(description="Wall time of the LLM call.")


class FacetValue(BaseModel):
    """A value of a facet and how many papers of the pool have it (``value`` null = unknown)."""

    value: str | int | None
    count: int


class Facets(BaseModel):
    """Counts by venue and year over the pool: the top ``pool`` papers matching the query and the
    filters (at most 100), the same ranking the hits come from."""

    pool: int
    venue: list[FacetValue]
    year: list[FacetValue]


class SearchResponse(BaseModel):
    """``GET /search``."""

    version: int
    query: str
    mode: Literal["default", "accurate"] = "default"
    filters: dict[str, Any]
    hits: list[SearchHit]
    facets: Facets
    seconds: float
    rerank: SearchRerank | None = Field(None, description="Only with mode=accurate.")


class AskRequest(BaseModel):
    """``POST /ask`` and ``POST /ask/json``."""

    question: str = Field(min_length=1, max_length=4000, description="The question, in natural language.")
    paper_ids: list[str] = Field(default_factory=list, max_length=20,
                                 description="Papers to focus on (metadata.paper_id UUIDs).")
    method: str | None = Field(None, max_length=64, description="Agent method (default: the agent's default, see "
                               "neusym.query.agent.methods); unknown names are refused listing the valid ones.")
    answer_format: str | None = Field(None, max_length=2000, description="The required format of the answer.")


class SqlRequest(BaseModel):
    """``POST /sql``."""

    sql: str = Field(min_length=1, max_length=20_000, description="One read-only query (DuckDB dialect).")
    format: Literal["json", "csv"] = Field("json", description="json: a JSON object with columns and rows; csv: "
                                           "text/csv (header line + rows).")
    max_rows: int | None = Field(None, ge=1, description="Row cap for this query (at most NEUSYM_SQL_MAX_ROWS).")


class SqlResponse(BaseModel):
    """``POST /sql`` with ``format: json``."""

    version: int
    columns: list[str]
    types: list[str]
    rows: list[list[Any]]
    row_count: int
    truncated: bool = Field(description="True when rows were left out (row or byte cap).")
    truncated_by: Literal["rows", "bytes"] | None = None
    cells_cut: int = Field(0, description="Long text cells shortened by the per-cell cap.")
    elapsed_s: float


class SchemaColumn(BaseModel):
    name: str
    type: str
    comment: str | None = None


class SchemaRelation(BaseModel):
    name: str
    kind: Literal["table", "view"]
    comment: str | None = None
    primary_key: list[str] = []
    columns: list[SchemaColumn]


class SqlExample(BaseModel):
    title: str
    sql: str


class SchemaResponse(BaseModel):
    """``GET /schema``: every table and view with its comments (docs/schema.md), and example queries."""

    version: int
    relations: list[SchemaRelation]
    examples: list[SqlExample]


class ErrorResponse(BaseModel):
    """Every 4xx/5xx answer: ``detail`` says what was wrong and, where it helps, what to do."""

    detail: str
