"""Shared fixtures: the bundled real sample corpus ingested once per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "samples" / "pdfs"
FIXTURES = REPO / "tests" / "fixtures"

# Page counts as printed in ../shared/corpus/MANIFEST.md (independent of our parser).
SAMPLE_PAGES = {
    "acl2020_2020.acl-main.207_SPECTER.pdf": 13,
    "naacl2018_N18-3011_SemanticScholarLiteratureGraph.pdf": 8,
    "acl2023_2023.acl-long.478_PopQA-WhenNotToTrustLMs.pdf": 18,
    "acl2023_DecompX_acl-long.pdf": 14,
    "eacl2023_2023.eacl-main.121_LongEval.pdf": 20,
}


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def sample_pdfs() -> list[Path]:
    return sorted(SAMPLES.glob("*.pdf"))


@pytest.fixture(scope="session")
def ingested(tmp_path_factory):
    """(settings, report) after ``neusym.ingest.pipeline.ingest`` of samples/pdfs into a fresh NEUSYM_HOME."""
    from neusym.ingest.pipeline import ingest
    from neusym.settings import Settings

    home = tmp_path_factory.mktemp("neusym-home")
    settings = Settings(home=home, pdf_dirs=[SAMPLES])
    report = ingest([SAMPLES], settings)
    return settings, report


@pytest.fixture(scope="session")
def corpus_settings(ingested):
    """Settings of a NEUSYM_HOME holding the ingested sample corpus (DuckDB + local Qdrant)."""
    return ingested[0]


@pytest.fixture(scope="module")
def db(corpus_settings):
    """A read-only connection to the current version of the sample corpus, with the service's read-only
    configuration (so it can be open next to a server in this process): expected values straight from
    the database."""
    from neusym.store.db import connect_readonly
    from neusym.store.versions import current_version

    con = connect_readonly(current_version(corpus_settings).db_path)
    yield con
    con.close()
