"""The layers hold: import-linter's contracts of pyproject.toml ([tool.importlinter]) pass, no package
has an import cycle among its modules, and the top of ``neusym/`` stays small (README "Architecture")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_import_linter_contracts_hold():
    lint = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run([str(lint), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "Contracts: 3 kept, 0 broken." in done.stdout, done.stdout[-2000:]


def test_a_contract_violation_is_caught(tmp_path):
    """The check can fail: a store module that imports the query layer breaks the layers contract."""
    import shutil

    copy = tmp_path / "repo"
    shutil.copytree(REPO / "neusym", copy / "neusym", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", copy / "pyproject.toml")
    bad = copy / "neusym" / "store" / "db.py"
    bad.write_text(bad.read_text() + "\nfrom neusym.query import sqlsafe  # noqa: E402,F401\n")
    lint = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run([str(lint), "--no-cache"], cwd=copy, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 1 and "neusym.store is not allowed to import neusym.query" in done.stdout, done.stdout[-2000:]


def test_at_most_ten_modules_directly_under_neusym():
    modules = sorted(p.name for p in (REPO / "neusym").glob("*.py") if p.name != "__init__.py")
    assert len(modules) <= 10, modules


def test_the_answer_engine_importing_the_agent_is_caught(tmp_path):
    """The answer engine stands below the agent loop (which ask() hands to the router): a module of
    neusym.query.answer that imports neusym.query.agent breaks the forbidden contract."""
    import shutil

    copy = tmp_path / "repo"
    shutil.copytree(REPO / "neusym", copy / "neusym", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", copy / "pyproject.toml")
    bad = copy / "neusym" / "query" / "answer" / "router.py"
    bad.write_text(bad.read_text() + "\nfrom neusym.query.agent.react import run_loop  # noqa: E402,F401\n")
    lint = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run([str(lint), "--no-cache"], cwd=copy, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 1 and "neusym.query.answer is not allowed to import neusym.query.agent" in done.stdout, \
        done.stdout[-2000:]
