"""One settings object for the whole project.

Every value can be set with an environment variable ``NEUSYM_<FIELD>`` (case-insensitive), e.g.
``NEUSYM_HOME=/data/neusym``. Nothing else in the code base hard-codes a path: derived locations
(``corpus.duckdb``, ``staging/``, ``qdrant/``, ``models/``) are properties of :class:`Settings`.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


#: Settings that are gone, and what took their place (a variable still set is refused).
RETIRED = {
    "table_answer": "tables are always answered through a query over the table's cells (its one legal value was sql)",
    "snapshot_keep": "nothing read it; NEUSYM_VERSIONS_KEEP says how many corpus versions are kept",
    "bm25_k1": "BM25's k1 and b are fixed (neusym.encode.BM25_K1 / BM25_B) so every stored vector agrees",
    "bm25_b": "BM25's k1 and b are fixed (neusym.encode.BM25_K1 / BM25_B) so every stored vector agrees",
    "cues_off": "turning cue families off is an evaluation option: neusym eval run --cues-off JSON",
    "crash_at": "crash tests inject their faults themselves (tests/test_store.py)",
}


class Settings(BaseSettings):
    """Runtime configuration (env prefix ``NEUSYM_``)."""

    model_config = SettingsConfigDict(env_prefix="NEUSYM_", extra="ignore")

    # -- storage -------------------------------------------------------------------------------
    home: Path = Field(Path("./.neusym"), description="Root of all state: DuckDB file, staging, vectors, models.")
    pdf_dirs: list[Path] = Field(
        default_factory=list,
        description="PDF files/folders the corpus refresh reads (JSON list in NEUSYM_PDF_DIRS); empty = home/pdfs.",
    )
    cache_dir: Path = Field(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "neusym",
        description="Machine-wide cache shared by every NEUSYM_HOME: the ONNX export of all-MiniLM-L6-v2.")
    refresh_cron: str = Field("0 2 * * *", description="Schedule of the corpus_refresh DAG (cron, UTC).")
    # -- crawl ---------------------------------------------------------------------------------
    crawl_sources: list[dict] = Field(
        default_factory=list,
        description='Metadata sources of the nightly crawl (JSON list in NEUSYM_CRAWL_SOURCES), e.g. '
        '[{"source": "acl", "paths": ["https://.../2024.acl.xml"], "volumes": ["long"]}, '
        '{"source": "arxiv", "categories": ["cs.CL"]}, {"source": "openreview", "venue_id": "ICLR.cc/2024/Conference"}].',
    )
    crawl_download: bool = Field(True, description="Download the PDFs of crawled papers (then parse them).")
    arxiv_api_url: str | None = Field(None, description="arXiv API query URL override (tests, mirrors).")
    arxiv_delay_s: float = Field(3.0, description="Minimum gap between arXiv API requests (arXiv asks ~3 s).")
    arxiv_page_size: int = 100
    arxiv_max_results: int = 1000
    openreview_baseurl: str = "https://api2.openreview.net"
    openreview_username: str | None = None
    openreview_password: str | None = None
    source_timeout_s: float = 60.0
    source_retries: int = 3
    source_backoff_s: float = 5.0
    download_max_mb: float = Field(100.0, description="Largest PDF accepted by the download stage.")
    pdf_mirrors: dict[str, str] = Field(
        default_factory=dict,
        description='URL prefix rewrites for PDF downloads (JSON in NEUSYM_PDF_MIRRORS), e.g. '
        '{"https://aclanthology.org/": "http://mirror.internal/acl/"}.',
    )
    # -- parsing ---------------------------------------------------------------------------------
    parse_backend: Literal["pymupdf", "layout", "mineru"] = Field(
        "layout",
        description="Who finds table/figure regions, table cells and equations (text, sections, captions and "
        "references always come from PyMuPDF): pymupdf = text and drawings only (fast); layout = plus "
        "pymupdf4llm HTML tables and rapid-layout regions on the pages that need them (offline models); "
        "mineru = from MinerU's output for the PDF (see mineru_output_dir / mineru_command). "
        "Measured: layout costs ~10x the parse time of pymupdf (benchmarks/results/extraction.json).",
    )
    parse_workers: int = Field(
        0, ge=0, le=16,
        description="Processes parsing PDFs side by side in `neusym ingest` of several PDFs, while the ingest "
        "process encodes the finished ones (0 = one per core, at most 4). Each worker runs the layout models on "
        "one thread (benchmarks/results/ingest.json).")
    mineru_output_dir: Path | None = Field(
        None,
        description="MinerU's parsed-document folder (the local server's doclib, ~/.mineru/doclib/parsed): results "
        "are found by the PDF's sha256 as <dir>/<sha[:2]>/<sha>/<tier>/*.json.",
    )
    mineru_command: str | None = Field(
        None,
        description="The MinerU CLI (e.g. 'mineru'); when set, a PDF without MinerU output is first parsed with "
        "'<command> parse PDF --tier <mineru_tier> --pages all' (its local server or the one it is configured for).",
    )
    mineru_tier: str = Field("flash", description="MinerU parse tier: flash (offline), basic, standard, advanced.")
    mineru_timeout_s: float = Field(600.0, description="Wall-clock limit of one MinerU parse run.")
    # -- vector store --------------------------------------------------------------------------
    qdrant_url: str | None = Field(
        None, description="Qdrant server URL; unset = embedded qdrant-edge shards inside each corpus version.")
    qdrant_api_key: str | None = None
    qdrant_upsert_batch: int = 512
    versions_keep: int = Field(2, description="Published corpus versions kept on disk (current + previous); "
                               "a version that a reader still holds open is kept until it is released.")
    writer_wait_s: float = Field(600.0, description="How long a writer (ingest, crawl, enrich, the DAG's single "
                                 "writers) waits for another writer of the same NEUSYM_HOME before giving up.")
    # -- encoding ------------------------------------------------------------------------------
    chunk_tokens: int = Field(256, description="Chunk length in all-MiniLM-L6-v2 word pieces (its trained window).")
    dense_backend: Literal["onnx-int8", "torch"] = Field(
        "onnx-int8", description="How all-MiniLM-L6-v2 runs: onnx-int8 (ONNX Runtime, int8 weights, exported once into "
        "home/models) or torch (sentence-transformers). Changing it re-encodes every cell at the next publish.")
    dense_threads: int = Field(0, ge=0, description="Intra-op threads of batch encoding; 0 = one single-threaded session "
                               "per core side by side for batches of 64+ texts (neusym.encode.PARALLEL_MIN_TEXTS), the "
                               "runtime default below that; queries always use one thread.")
    dense_batch_size: int = Field(0, ge=0, description="Texts per model call when encoding cells and papers; 0 = the "
                                  "backend's own (onnx-int8: 1, torch: 32; neusym.encode.BACKEND_BATCH_SIZE).")
    bm25_avg_doc_tokens: float = Field(
        128.0, description="BM25 average document length (tokens) used for length normalisation of every cell."
    )
    # -- query layer -----------------------------------------------------------------------------
    sql_timeout_s: float = Field(10.0, description="Wall-clock limit for one SQL statement from an agent or a user.")
    sql_max_rows: int = Field(1000, description="Row cap for one SQL result.")
    sql_max_bytes: int = Field(1_000_000, description="Byte cap for one SQL result (text of its rows), applied while "
                               "fetching, before any formatting.")
    sql_max_cell_chars: int = Field(20_000, description="Longer text cells of a SQL result are cut to this many characters.")
    sql_memory_mb: int = Field(1024, ge=128, description="Memory budget of one SQL query from an agent or a user "
                               "(MiB): the address-space cap of the worker process that runs it; DuckDB's memory_limit "
                               "is 60% of it. A query that needs more is stopped with a message.")
    sql_temp_max_mb: int = Field(2048, ge=0, description="Spill files one SQL query may write (DuckDB "
                                 "max_temp_directory_size, MiB), under $NEUSYM_HOME/tmp/sql.")
    sql_workers: int = Field(2, ge=1, le=32, description="SQL queries running at once per process (worker processes); "
                             "with sql_memory_mb this bounds the memory all SQL can take.")
    sql_wait_s: float = Field(10.0, ge=0, description="How long a SQL query waits for a free worker before it is "
                              "refused as busy (HTTP 503 with Retry-After).")
    agent_max_turns: int = 20
    agent_max_seconds: float = Field(600.0, description="Wall-clock limit of one agent run: past 80% of it the next "
                                     "turn must answer, past it the run stops (stop_reason time_limit).")
    observation_max_tokens: int = Field(
        1500, description="Observation budget per turn in LLM tokens (approximated as 4 characters per token)."
    )
    eval_context_max_tokens: int = Field(
        5000,
        description="Context a method injects before the first turn (classic-rag chunks, title-abstract, the "
        "full-text cutoff), in LLM tokens (4 characters each); the paper's 5k.",
    )
    eval_classic_rag_top_k: int = Field(4, description="Chunks classic-rag retrieves with the question (paper: 4).")
    # -- LLM -----------------------------------------------------------------------------------
    llm_base_url: str | None = Field(None, description="OpenAI-compatible endpoint; unset = offline local model.")
    llm_model: str = "qwen2.5-coder-1.5b-instruct"
    llm_api_key: str | None = None
    llm_vision: bool = Field(False, description="The OpenAI-compatible model accepts images (ViewImage sends the PNG).")
    llm_temperature: float = 0.0
    llm_max_tokens: int = 512
    llm_context_tokens: int = Field(8192, description="Context window of the offline model (n_ctx).")
    llm_threads: int = Field(2, description="CPU threads of the offline model.")
    llm_timeout_s: float = 300.0
    # enrichment (LLM summaries, tldr/tags, OCR of figures): the corpus_enrich DAG / `neusym enrich`
    enrich_kinds: list[str] = Field(
        ["paper_tldr_tags", "table_summary", "image_ocr_text", "image_summary", "section_summary", "page_summary"],
        description="Enrichments to compute, in priority order (the budget is spent in this order).")
    enrich_budget_tokens: int = Field(60_000, description="Per-run budget of estimated LLM tokens (prompt + completion) "
                                      "for summaries; the rest waits for the next run.")
    enrich_ocr_budget: int = Field(400, description="Figures OCR'd per run at most (~1-3 s each on 2 cores).")
    enrich_task_seconds: float = Field(1800.0, description="A mapped enrichment task stops starting new items after "
                                       "this many seconds (its remaining items wait for the next run).")
    retriever_train_minutes: float = Field(25.0, gt=0, le=24 * 60, description="Training budget of `neusym "
                                           "train-retriever` / the retriever_refresh DAG, in minutes of wall time.")
    enrich_unit_size: int = Field(24, description="Items per mapped enrichment task.")
    enrich_concurrency: int = Field(1, description="Mapped enrichment tasks running at once (max_active_tis_per_dag); "
                                    "1 for the offline model, more for a remote endpoint.")
    enrich_max_attempts: int = Field(3, description="Failed items are retried by later runs up to this many attempts.")
    enrich_input_chars: int = Field(4000, description="Input text sent to the LLM per summary, in characters (~1k tokens).")
    enrich_max_tokens: int = Field(160, description="Completion tokens per summary.")
    # -- service -------------------------------------------------------------------------------
    ask_concurrency: int = Field(0, ge=0, le=64, description="Runs that use the LLM at once in `neusym serve` "
                                 "(agent runs, accurate searches); 0 = 1 for the offline model (it has one slot), "
                                 "4 with NEUSYM_LLM_BASE_URL.")
    ask_queue_max: int = Field(4, ge=0, le=100, description="Agent runs (POST /ask, /ask/json, accurate search) that "
                               "may wait for the LLM while it is busy; one more is refused with 503 and Retry-After.")
    ask_wait_s: float = Field(300.0, gt=0, description="How long a run waits for the LLM before it is refused with "
                              "503 and Retry-After.")
    search_accurate_offline: bool = Field(
        False, validation_alias=AliasChoices("search_accurate_offline", "NEUSYM_SEARCH_ACCURATE_OFFLINE",
                                             "NEUSYM_SEARCH_RERANK_OFFLINE"),
        description="Let GET /search?mode=accurate use the offline in-process model when no NEUSYM_LLM_BASE_URL is "
        "set (it loads ~1.5 GB and takes ~5 s per query on 2 cores, holding the one LLM slot); off: such a request "
        "is a 400 saying so. NEUSYM_SEARCH_RERANK_OFFLINE, its name before the accurate mode became HyDE, is read "
        "too.")
    api_keys: list[str] = Field(
        default_factory=list,
        description='API keys of `neusym serve` (JSON list in NEUSYM_API_KEYS, e.g. ["k1", "k2"]); when set, every '
        "endpoint but /healthz and the web page needs one as 'X-API-Key: KEY' or 'Authorization: Bearer KEY'. "
        "Empty = open (bind to 127.0.0.1).")
    public_url: str | None = Field(
        None,
        description="The service's address as its users reach it, e.g. https://papers.example.org/neusym/ "
        "(NEUSYM_PUBLIC_URL): absolute links the service writes (Atom feeds' links, /v1 citations' page_image) "
        "start with it. Unset: they start with the address of the socket the request arrived on "
        "(http://127.0.0.1:8000/ for `neusym serve` on loopback). Never taken from the request's Host header.")
    # -- cluster / storage ------------------------------------------------------------------------
    storage_url: str | None = Field(
        None,
        description="Shared storage of staging, the content-addressed PDF store and the published corpus versions, "
        "as an fsspec URL (file:///mnt/nfs/neusym, s3://bucket/neusym, gs://...; s3/gs need s3fs/gcsfs installed). "
        "Unset = everything stays in NEUSYM_HOME (one machine). When set, NEUSYM_HOME is this host's local "
        "working copy and cache (scratch, the writer's corpus.duckdb, synced versions).")
    storage_poll_s: float = Field(
        5.0, description="A reader checks the shared storage for a newer corpus version at most this often (seconds; "
        "0 = on every open).")
    writer_queue: str = Field("writer", description="Celery queue of the single-writer tasks (load_metadata, "
                              "materialize, publish, enrichment apply); exactly one worker serves it.")
    llm_pool: str = Field("neusym_llm", description="Airflow pool that caps concurrent LLM calls (summarize tasks).")
    llm_pool_slots: int = Field(1, description="Slots of the LLM pool made by `make cluster-up` (1 for the offline "
                                "model; more for an endpoint that serves requests in parallel).")
    task_retries: int = Field(2, description="Airflow retries of a DAG task (a lost worker's task runs again).")
    task_retry_delay_s: float = Field(10.0, description="Seconds between a failed task try and its retry.")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "WARNING", description="Log lines the command line prints (neusym's and the libraries' it loads); "
        "`--verbose` is INFO. Below INFO the model libraries' loading lines stay quiet.")

    @model_validator(mode="after")
    def _no_retired_setting(self) -> "Settings":
        """A retired ``NEUSYM_*`` variable still set is refused, naming what replaced it: ignoring it
        would let a user believe it still acts (settings fail closed)."""
        for name, why in RETIRED.items():
            variable = f"NEUSYM_{name.upper()}"
            if os.environ.get(variable) is not None:
                raise ValueError(f"{variable} is no longer a setting: {why}; unset it")
        return self

    @field_validator("log_level", mode="before")
    @classmethod
    def _log_level(cls, value: object) -> object:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str | None) -> str | None:
        """An absolute http(s) URL with a host, ending in "/" (added when missing); blank = unset."""
        from urllib.parse import urlsplit

        if value is None or not value.strip():
            return None
        text = value.strip()
        parts = urlsplit(text)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
            raise ValueError(f"NEUSYM_PUBLIC_URL must be an absolute http(s) URL like https://papers.example.org/ "
                             f"(no query or fragment), got {text[:200]!r}")
        return text if text.endswith("/") else text + "/"

    @property
    def input_paths(self) -> list[Path]:
        """Where the corpus refresh looks for PDFs: ``pdf_dirs`` or, when empty, ``home/pdfs``."""
        return list(self.pdf_dirs) or [self.home / "pdfs"]

    @property
    def db_path(self) -> Path:
        """The DuckDB corpus file, ``$NEUSYM_HOME/corpus.duckdb``."""
        return self.home / "corpus.duckdb"

    @property
    def staging_dir(self) -> Path:
        """Per-paper parse and vector results written by parallel tasks, read by the single writer."""
        return self.home / "staging"

    @property
    def quarantine_dir(self) -> Path:
        """One JSON file per PDF that could not be parsed (reason, path, sha256)."""
        return self.home / "quarantine"

    @property
    def versions_dir(self) -> Path:
        """Published corpus versions (DuckDB snapshot + vector shards), ``$NEUSYM_HOME/versions``."""
        return self.home / "versions"

    @property
    def legacy_qdrant_path(self) -> Path:
        """Where neusym before corpus versions kept its qdrant-client local-mode store (migrated on publish)."""
        return self.home / "qdrant"

    @property
    def models_dir(self) -> Path:
        """Assembled model files (e.g. the offline GGUF), verified by checksum."""
        return self.home / "models"


@lru_cache(maxsize=1)
def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one, else all; at least 1):
    what worker and thread-pool sizes are derived from."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def get_settings() -> Settings:
    """The process-wide settings read from the environment (cached; tests build their own ``Settings``)."""
    return Settings()
