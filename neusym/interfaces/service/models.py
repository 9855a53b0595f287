"""Request and response models of the HTTP API (they make its OpenAPI schema)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from neusym.query.answer.shapes import AnswerShape


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
    default_rank: int | None = Field(None, description="Only with mode=accurate: the paper's 1-based place in the "
                                     "default ranking (absent when below its first 100).")
    cited_by: int | None = Field(None, description="How many papers of this corpus cite it (view paper_citations); "
                                 "absent on versions published before the citation graph existed.")


class SearchHyde(BaseModel):
    """``GET /search?mode=accurate``: the hypothetical paper the LLM wrote and whether it was used."""

    applied: bool = Field(description="The hypothesis joined the query (false: the LLM failed or its reply was "
                          "unusable; the hits are the default ranking's).")
    note: str | None = Field(None, description="Why the default ranking was kept, when it was.")
    title: str | None = Field(None, description="The hypothetical title (null when the LLM call failed).")
    abstract: str | None = Field(None, description="The hypothetical abstract (null when the LLM call failed).")
    llm_seconds: float = Field(description="Wall time of the LLM call.")
    prompt_tokens: int = 0
    completion_tokens: int = 0


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
    hyde: SearchHyde | None = Field(None, description="Only with mode=accurate.")


class AskRequest(BaseModel):
    """``POST /ask`` and ``POST /ask/json``."""

    question: str = Field(min_length=1, max_length=4000, description="The question, in natural language.")
    paper_ids: list[str] = Field(default_factory=list, max_length=20,
                                 description="Papers to focus on (metadata.paper_id UUIDs).")
    method: str | None = Field(None, max_length=64, description="Agent method (default: the agent's default, see "
                               "neusym.query.agent.methods); unknown names are refused listing the valid ones.")
    shape: AnswerShape | None = Field(None, description="The shape the answer must take: an object such as "
                                      '{"kind": "number", "digits": 2} or the compact form "number:2" (kinds: text, '
                                      "string, integer, number[:DECIMALS], boolean, list[:N | :NAME,NAME]).")
    answer_format: str | None = Field(None, max_length=2000, description="An answer-format sentence as AirQA question "
                                      "sets write it; give this or shape, not both.")

    @field_validator("shape", mode="before")
    @classmethod
    def _compact_shape(cls, value: object) -> object:
        return AnswerShape.parse(value) if isinstance(value, str) else value


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
