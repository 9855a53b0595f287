"""The user's README stays short and true: two fresh-machine commands (the second is what CI runs),
every relative link in README.md, docs/ and benchmarks/README.md names a file that exists (and a heading
that exists when it names one), and every benchmark script is listed in benchmarks/README.md."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _docs() -> list[Path]:
    return [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", title)))
    return out


def test_the_readme_is_short_and_names_the_two_commands_ci_runs():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    block = text.split("## On a fresh machine", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == ["make demo", "make test"]
    assert "make test" in (ROOT / ".ci" / "run").read_text().split("\n", 3)[-1]


def test_every_relative_link_resolves():
    broken = []
    for doc in _docs():
        for target in LINK.findall(doc.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            file_part, _, anchor = target.partition("#")
            path = (doc.parent / file_part).resolve() if file_part else doc
            if not path.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, broken


def test_every_benchmark_script_is_listed_in_the_benchmarks_readme():
    listed = (ROOT / "benchmarks" / "README.md").read_text()
    missing = [p.name for p in sorted((ROOT / "benchmarks").glob("*.py")) if p.name not in listed]
    assert not missing, missing
