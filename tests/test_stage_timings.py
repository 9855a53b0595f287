"""Where a refresh's time goes: seconds per stage recorded in the version it publishes, shown by
``neusym status --json`` and ``GET /overview``; progress bars on a terminal and plain lines in a pipe.

The real CLI runs in a subprocess over a real ACL Anthology PDF of the sample corpus, once under a
pseudo-terminal (``pty``) and once with its output piped."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from neusym.ingest.stages import STAGES
from neusym.interfaces.service import create_app
from neusym.settings import Settings
from neusym.store.versions import current_version

from .conftest import SAMPLES
from .service_support import LiveServer

pytestmark = pytest.mark.slow

PDF = "naacl2018_N18-3011_SemanticScholarLiteratureGraph.pdf"  # 8 pages
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _env(home: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "NEUSYM_LOG_LEVEL"}
    return {**env, "NEUSYM_HOME": str(home), "COLUMNS": "120", **extra}


def run_in_pty(args: list[str], env: dict, timeout: float = 600) -> tuple[int, str]:
    """Run ``args`` with stdin/stdout/stderr on a pseudo-terminal; (exit code, everything it wrote)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(args, stdin=follower, stdout=follower, stderr=follower, env=env, close_fds=True)
    os.close(follower)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.5)
        if ready:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(leader)
    code = proc.wait(timeout=60)
    return code, b"".join(chunks).decode("utf-8", "replace")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A home that got one PDF by ``neusym ingest`` on a terminal, then the same PDF again through a pipe."""
    root = tmp_path_factory.mktemp("stages")
    inbox = root / "in"
    inbox.mkdir()
    shutil.copy(SAMPLES / PDF, inbox / PDF)
    home = root / "home"
    cli = [sys.executable, "-m", "neusym.interfaces.cli"]
    code, terminal = run_in_pty([*cli, "ingest", str(inbox)], _env(home))
    assert code == 0, terminal[-3000:]
    manifest = dict(current_version(Settings(home=home)).manifest)
    piped = subprocess.run([*cli, "ingest", str(inbox)], env=_env(home), capture_output=True, text=True, timeout=600)
    assert piped.returncode == 0, piped.stderr[-3000:]
    status = subprocess.run([*cli, "status", "--json"], env=_env(home), capture_output=True, text=True, timeout=300)
    assert status.returncode == 0, status.stderr[-3000:]
    return {"home": home, "terminal": terminal, "first_manifest": manifest, "piped": piped,
            "status": json.loads(status.stdout)}


def test_the_published_version_records_seconds_per_stage(runs):
    stages = runs["first_manifest"]["stages"]
    # every stage a local ingest runs, none negative
    assert {"parse", "encode", "materialize", "table_cells", "citations", "cells", "paper_index", "publish"} <= set(stages)
    assert "fetch" not in stages and "download" not in stages  # nothing was crawled
    assert all(v >= 0 for v in stages.values())
    # parsing an 8-page PDF with layout and table-structure models takes real time; table cells are part of materialize
    assert stages["parse"] > 1.0 and stages["table_cells"] <= stages["materialize"]
    # the publish's own steps are the manifest's timings of the same build
    timings = runs["first_manifest"]["timings"]
    assert stages["paper_index"] == pytest.approx(timings["paper_index"], abs=1e-3)
    assert stages["cells"] == pytest.approx(timings["cells"], abs=1e-3)


def test_status_shows_the_current_versions_stages(runs):
    status = runs["status"]
    manifest = current_version(Settings(home=runs["home"])).manifest
    assert status["version"] == manifest["version"] == 2  # the piped run published again
    assert status["stages"] == manifest["stages"]
    assert list(status["stages"]) == [s for s in STAGES if s in status["stages"]]  # in run order
    # the second run parsed nothing: the staged parse was reused, so parse is the reuse check only
    assert status["stages"]["parse"] < runs["first_manifest"]["stages"]["parse"]


def test_a_terminal_gets_progress_bars_and_the_stage_summary(runs):
    text = runs["terminal"]
    assert ANSI.search(text), "no terminal control sequences: the progress bars were not drawn"
    plain = ANSI.sub("", text)
    assert re.search(r"parse\s+\S*\s*1/1", plain) and re.search(r"encode\s+\S*\s*1/1", plain)
    assert "pages/s" in plain
    assert "where the time went" in plain and re.search(r"table_cells\s*│\s*\d+\.\d", plain)
    # the model libraries' INFO lines stay quiet without --verbose
    assert "File exists and is valid" not in plain and "Using engine_name" not in plain


def test_a_pipe_gets_plain_lines_without_control_sequences(runs):
    piped = runs["piped"]
    assert not ANSI.search(piped.stderr) and not ANSI.search(piped.stdout)
    assert re.search(rf"^parse reused\s+.*{re.escape(PDF)}.*\(\d+\.\d s\)$", piped.stderr, re.M), piped.stderr
    assert "where the time went" in piped.stdout
    assert "File exists and is valid" not in piped.stderr


def test_the_overview_endpoint_shows_the_stages(runs):
    settings = Settings(home=runs["home"])
    with LiveServer(create_app(settings)) as server:
        r = httpx.get(f"{server.url}/overview", timeout=60)
    assert r.status_code == 200
    assert r.json()["stages"] == current_version(settings).manifest["stages"]


def test_a_bad_log_level_is_refused_by_name(runs):
    run = subprocess.run([sys.executable, "-m", "neusym.interfaces.cli", "status"],
                         env=_env(runs["home"], NEUSYM_LOG_LEVEL="chatty"), capture_output=True, text=True, timeout=300)
    assert run.returncode == 1 and "NEUSYM_LOG_LEVEL" in run.stderr and "Traceback" not in run.stderr
