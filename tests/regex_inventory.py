"""Every regular expression of the ``neusym`` package, and how long each takes on adversarial text.

Used by ``tests/test_regex_budget.py`` (and runnable: ``python -m tests.regex_inventory`` lists the
slowest). Patterns are found two ways: string literals passed to a ``re`` function anywhere in the
package's source (``re.sub(r"...", ...)``, ``re.compile(...)``, with literal flags), and compiled
patterns held by a module (``_X = re.compile(f"...")`` built from constants, also inside a module-level
list, tuple, set or dict). Each is run over inputs built to make a backtracking engine work hard:
long runs of one character (whitespace, letters, digits, the pattern's own punctuation), of two
alternating characters, and the same followed by a character that makes the match fail at the end.
A pattern called with ``re.match``/``re.fullmatch`` is timed that way; every other one is scanned
over the whole input (``finditer``: what ``search``, ``sub``, ``findall`` and ``split`` do on text
without a match). Time that grows faster than the input (``\\s*x`` at every start of a run of blanks,
nested or adjacent quantifiers over the same characters) shows as seconds on 16k characters, where
a linear pattern takes about a millisecond.
"""

from __future__ import annotations

import ast
import importlib
import multiprocessing
import pkgutil
import re
import time
from dataclasses import dataclass
from pathlib import Path

import neusym

ROOT = Path(neusym.__file__).parent
_CALLS = {"compile": 1, "search": 2, "match": 2, "fullmatch": 2, "findall": 2, "finditer": 2, "split": 3,
          "sub": 4, "subn": 4}
_BASE = [" ", "\n", "\t", "a", "A", "1", "0", ".", "-", ",", "(", "[", "é"]
_META = set("\\^$*+?{}|()[]")


@dataclass(frozen=True)
class Found:
    pattern: str
    flags: int
    where: str
    mode: str  # "scan" or "anchored"


def _flags(node: ast.AST | None) -> int:
    if node is None:
        return 0
    try:
        return int(eval(compile(ast.Expression(node), "<flags>", "eval"), {"re": re}))  # noqa: S307 - re.X | re.Y only
    except Exception:  # noqa: BLE001 - not a literal flag expression
        return 0


def _methods_by_name(trees: list[ast.AST]) -> dict[str, set[str]]:
    """For every name ``X`` called as ``X.match(...)``, ``X.sub(...)``, ...: the pattern methods it is called with."""
    used: dict[str, set[str]] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _CALLS
                    and isinstance(node.func.value, ast.Name) and node.func.value.id != "re"):
                used.setdefault(node.func.value.id, set()).add(node.func.attr)
    return used


def _mode(name: str, used: dict[str, set[str]]) -> str:
    """"anchored" when every call of the compiled pattern ``name`` is ``match``/``fullmatch``, else "scan"."""
    methods = used.get(name)
    return "anchored" if methods and methods <= {"match", "fullmatch"} else "scan"


def patterns() -> list[Found]:
    """The package's patterns (see the module docstring), one entry per (pattern, flags, mode)."""
    out: dict[tuple, Found] = {}
    trees = {path: ast.parse(path.read_text(encoding="utf-8")) for path in sorted(ROOT.rglob("*.py"))}
    used = _methods_by_name(list(trees.values()))
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if node.__class__ is ast.Call and isinstance(node.func, ast.Attribute) and node.func.attr == "compile":
                continue  # compiled patterns are taken from the modules below, with how they are called
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in _CALLS and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "re" and node.args):
                continue
            first = node.args[0]
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                continue
            flag_node = next((k.value for k in node.keywords if k.arg == "flags"), None)
            if flag_node is None and len(node.args) > _CALLS[node.func.attr]:
                flag_node = node.args[_CALLS[node.func.attr]]
            mode = "anchored" if node.func.attr in ("match", "fullmatch") else "scan"
            found = Found(first.value, _flags(flag_node), f"{path.relative_to(ROOT.parent)}:{node.lineno}", mode)
            out.setdefault((found.pattern, found.flags, mode), found)
    for info in pkgutil.walk_packages(neusym.__path__, "neusym."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            values = [value]
            if isinstance(value, dict):
                values += list(value.values())
            elif isinstance(value, (list, tuple, set, frozenset)):
                values += list(value)
            for item in values[1:]:  # (pattern, label) pairs, registry objects holding a pattern (cues)
                if isinstance(item, (list, tuple)):
                    values += list(item)
                elif hasattr(item, "__dict__") and not isinstance(item, type):
                    values += [a for a in vars(item).values() if isinstance(a, re.Pattern)]
            for v in values:
                if isinstance(v, re.Pattern) and isinstance(v.pattern, str):
                    mode = _mode(name, used) if v is value else "scan"
                    out.setdefault((v.pattern, v.flags, mode), Found(v.pattern, v.flags, f"{info.name}.{name}", mode))
    return sorted(out.values(), key=lambda f: f.where)


def adversarial_inputs(pattern: str, length: int) -> list[str]:
    """Inputs of about ``length`` characters that make backtracking patterns slow (module docstring)."""
    chars = sorted({c for c in pattern if not c.isalnum() and c not in _META} | set(_BASE))
    runs = [c * length for c in chars]
    pairs = [(a + b) * (length // 2) for a in _BASE[:7] for b in _BASE[:7] if a != b]
    failing = [c * length + "\x00" for c in _BASE] + [(c + " ") * (length // 2) + "\x00" for c in _BASE[3:8]]
    return runs + pairs + failing


def worst_seconds(found: Found, length: int = 16384, stop_after_s: float = 1.0) -> tuple[float, str]:
    """``(seconds, input head)``: the slowest adversarial input of ``found``'s pattern (stops early
    once one input takes ``stop_after_s``)."""
    rx = re.compile(found.pattern, found.flags)
    worst, head = 0.0, ""
    for text in adversarial_inputs(found.pattern, length):
        t = time.perf_counter()
        if found.mode == "anchored":
            rx.match(text)
            rx.fullmatch(text)
        else:
            for _ in rx.finditer(text):
                pass
        took = time.perf_counter() - t
        if took > worst:
            worst, head = took, text[:8]
        if worst >= stop_after_s:
            break
    return worst, head


def _timed(found: Found) -> tuple[Found, float, str]:
    seconds, head = worst_seconds(found)
    return found, seconds, head


def measure(found: list[Found], *, timeout_s: float = 20.0, processes: int = 2) -> list[tuple[Found, float, str]]:
    """``worst_seconds`` of every pattern in worker processes; a pattern still running after
    ``timeout_s`` is reported with ``inf`` seconds (its worker is replaced)."""
    ctx = multiprocessing.get_context("fork")
    results: list[tuple[Found, float, str]] = []
    todo = list(found)
    while todo:
        with ctx.Pool(processes) as pool:
            pending = [(f, pool.apply_async(_timed, (f,))) for f in todo]
            todo = []
            for i, (f, res) in enumerate(pending):
                try:
                    results.append(res.get(timeout_s))
                except multiprocessing.TimeoutError:
                    results.append((f, float("inf"), "(timed out)"))
                    todo = [g for g, r in pending[i + 1:] if not r.ready()]
                    results += [r.get() for g, r in pending[i + 1:] if r.ready()]
                    break
            pool.terminate()
    return results


if __name__ == "__main__":
    rows = measure(patterns())
    for f, s, head in sorted(rows, key=lambda r: -r[1])[:40]:
        print(f"{s:8.3f}s  {f.where}  {f.mode}  {f.pattern[:90]!r}  on {head!r}")
    print(len(rows), "patterns")
