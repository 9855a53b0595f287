"""The LLM judge behind the subjective evaluation functions.

A :class:`Judge` wraps any object with the chat-LLM protocol of :mod:`neusym.llm.chat`
(``chat(messages, *, json_schema=None, max_tokens=None) -> LLMReply``). For each question it

1. renders a prompt file ``neusym/prompts/judge_<name>.md`` (system + user part, ``{{variable}}``
   placeholders, a ``version:`` in its header comment),
2. asks for a JSON verdict constrained by a JSON schema (the model should run at temperature 0:
   :meth:`Judge.from_settings` forces it; a non-zero ``temperature`` on a given LLM is warned about),
3. parses and validates the verdict — a reply that is not valid JSON of the expected shape raises
   :class:`JudgeVerdictError`, which the evaluation functions turn into score 0 with an error,
4. caches the raw verdict under ``sha256(model, prompt name, prompt version, rendered messages,
   schema)`` in memory and, when a ``cache_dir`` is given, in ``<cache_dir>/judge_verdicts.sqlite``
   so re-scoring a run never asks the same question twice. Failed parses are not cached.

The text being judged (the agent's answer) is untrusted: prompts wrap it in tags and tell the judge
to ignore instructions inside it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import sqlite3
import threading
import time
import warnings
import weakref
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Callable

from neusym.errors import NeusymError
from neusym.llm.prompts import prompt_sections

logger = logging.getLogger(__name__)

CACHE_FILE = "judge_verdicts.sqlite"
_PLACEHOLDER_RE = re.compile(r"\{\{\s*(\w+)\s*\}\}")
_VERSION_RE = re.compile(r"version\s*:\s*([\w.\-]+)", re.I)


class JudgeError(NeusymError):
    """Base class of judge failures."""


class JudgeUnavailableError(JudgeError):
    """A subjective evaluation function was called without an LLM judge."""


class JudgeVerdictError(JudgeError):
    """The judge's reply is not a JSON verdict of the expected shape."""


class JudgePromptError(JudgeError):
    """A judge prompt file is missing or malformed, or a placeholder has no value."""


# -- prompts ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class JudgePrompt:
    """A judge prompt file: ``name`` (``reference_answer`` for ``judge_reference_answer.md``),
    ``version`` (from the header comment) and the ``system`` / ``user`` templates."""

    name: str
    version: str
    system: str
    user: str

    def render(self, variables: dict[str, str]) -> list[dict]:
        """The chat messages with every ``{{name}}`` replaced by ``variables[name]`` (one pass:
        substituted values are never re-scanned). Raises :class:`JudgePromptError` for a
        placeholder without a value."""

        def fill(template: str) -> str:
            def sub(match: re.Match) -> str:
                key = match.group(1)
                if key not in variables:
                    raise JudgePromptError(f"judge prompt {self.name!r}: no value for {{{{{key}}}}}")
                return str(variables[key])

            return _PLACEHOLDER_RE.sub(sub, template).strip()

        messages = []
        if self.system.strip():
            messages.append({"role": "system", "content": fill(self.system)})
        messages.append({"role": "user", "content": fill(self.user)})
        return messages


_PROMPTS: dict[str, JudgePrompt] = {}
_PROMPTS_LOCK = threading.Lock()


def parse_prompt(name: str, text: str) -> JudgePrompt:
    """Parse a judge prompt file: a header comment with ``version: N``, then ``<!-- system -->``
    and ``<!-- user -->`` marker lines starting the two parts. Raises :class:`JudgePromptError`."""
    version = _VERSION_RE.search(text.split("\n", 1)[0])
    if not version:
        raise JudgePromptError(f"judge prompt {name!r}: first line must be a comment with 'version: N'")
    parts = prompt_sections(text)
    if "user" not in parts:
        raise JudgePromptError(f"judge prompt {name!r}: missing '<!-- user -->' section")
    return JudgePrompt(name=name, version=version.group(1), system=parts.get("system", ""), user=parts["user"])


def load_prompt(name: str) -> JudgePrompt:
    """The packaged prompt ``neusym/prompts/judge_<name>.md`` (read once per process)."""
    with _PROMPTS_LOCK:
        prompt = _PROMPTS.get(name)
        if prompt is None:
            try:
                text = resources.files("neusym").joinpath("prompts", f"judge_{name}.md").read_text(encoding="utf-8")
            except (FileNotFoundError, OSError) as exc:
                raise JudgePromptError(f"judge prompt file judge_{name}.md not found: {exc}") from exc
            prompt = _PROMPTS[name] = parse_prompt(name, text)
        return prompt


# -- verdict parsing ----------------------------------------------------------------------------


def parse_json_object(text: str) -> dict:
    """The JSON object in an LLM reply (whole text, inside a code fence, or the outermost
    ``{...}`` span). Raises :class:`JudgeVerdictError` when there is none."""
    s = (text or "").strip()
    fence = re.match(r"^```[\w-]*\s*\n?(.*?)\n?```$", s, re.S)
    if fence:
        s = fence.group(1).strip()
    candidates = [s]
    start, end = s.find("{"), s.rfind("}")
    if 0 <= start < end:
        candidates.append(s[start : end + 1])
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            return value
    raise JudgeVerdictError(f"judge reply is not a JSON object: {s[:200]!r}")


def _as_bool(value: Any, field: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in {"true", "false", "yes", "no"}:
        return value.strip().lower() in {"true", "yes"}
    raise JudgeVerdictError(f"judge verdict field {field!r} is not a boolean: {value!r}")


@dataclass(frozen=True)
class Verdict:
    """One yes/no judgement: ``passed`` and the judge's ``reasoning``."""

    passed: bool
    reasoning: str = ""


def _binary_schema(field: str) -> dict:
    return {
        "type": "object",
        "properties": {"reasoning": {"type": "string"}, field: {"type": "boolean"}},
        "required": ["reasoning", field],
        "additionalProperties": False,
    }


SCORING_POINTS_SCHEMA = {
    "type": "object",
    "properties": {
        "points": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "index": {"type": "integer"},
                    "reasoning": {"type": "string"},
                    "mentioned": {"type": "boolean"},
                },
                "required": ["index", "reasoning", "mentioned"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["points"],
    "additionalProperties": False,
}
REFERENCE_ANSWER_SCHEMA = _binary_schema("correct")
FORMULA_SCHEMA = _binary_schema("equivalent")


def _binary_validator(field: str) -> Callable[[dict], Verdict]:
    def validate(data: dict) -> Verdict:
        if field not in data:
            raise JudgeVerdictError(f"judge verdict has no {field!r} field: {json.dumps(data)[:200]}")
        return Verdict(_as_bool(data[field], field), str(data.get("reasoning", "")))

    return validate


def _points_validator(n: int) -> Callable[[dict], list[Verdict]]:
    def validate(data: dict) -> list[Verdict]:
        points = data.get("points")
        if not isinstance(points, list) or len(points) != n:
            got = len(points) if isinstance(points, list) else type(points).__name__
            raise JudgeVerdictError(f"judge verdict must list {n} scoring points, got {got}")
        verdicts: list[Verdict | None] = [None] * n
        indices = [p.get("index") if isinstance(p, dict) else None for p in points]
        by_index = all(type(i) is int for i in indices) and sorted(indices) == list(range(1, n + 1))
        for position, point in enumerate(points):
            if not isinstance(point, dict) or "mentioned" not in point:
                raise JudgeVerdictError(f"judge verdict scoring point {position + 1} has no 'mentioned' field")
            slot = point["index"] - 1 if by_index else position
            verdicts[slot] = Verdict(_as_bool(point["mentioned"], "mentioned"), str(point.get("reasoning", "")))
        return [v for v in verdicts if v is not None]

    return validate


# -- cache -------------------------------------------------------------------------------------


class VerdictCache:
    """Raw verdicts by key: an in-memory dict in front of an optional SQLite file
    ``<directory>/judge_verdicts.sqlite`` (created on first use; safe across threads and processes)."""

    def __init__(self, directory: Path | str | None = None):
        self.path = Path(directory) / CACHE_FILE if directory is not None else None
        self._memory: dict[str, dict] = {}
        self._lock = threading.Lock()
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._connect() as db:
                db.execute(
                    "CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, model TEXT, prompt TEXT,"
                    " prompt_version TEXT, verdict TEXT NOT NULL, raw_reply TEXT, created_at REAL)"
                )

    def _connect(self) -> sqlite3.Connection:
        assert self.path is not None
        return sqlite3.connect(self.path, timeout=30)

    def get(self, key: str) -> dict | None:
        """The cached verdict for ``key`` or ``None``."""
        with self._lock:
            if key in self._memory:
                return self._memory[key]
        if self.path is None:
            return None
        with self._connect() as db:
            row = db.execute("SELECT verdict FROM verdicts WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        try:
            verdict = json.loads(row[0])
        except ValueError:
            return None
        with self._lock:
            self._memory[key] = verdict
        return verdict

    def put(self, key: str, verdict: dict, *, model: str, prompt: str, version: str, raw_reply: str) -> None:
        """Store ``verdict`` under ``key`` (memory, and the SQLite file when configured)."""
        with self._lock:
            self._memory[key] = verdict
        if self.path is None:
            return
        with self._connect() as db:
            db.execute(
                "INSERT OR REPLACE INTO verdicts VALUES (?, ?, ?, ?, ?, ?, ?)",
                (key, model, prompt, version, json.dumps(verdict, ensure_ascii=False), raw_reply, time.time()),
            )

    def __len__(self) -> int:
        if self.path is None:
            return len(self._memory)
        with self._connect() as db:
            return int(db.execute("SELECT count(*) FROM verdicts").fetchone()[0])


# -- judge -------------------------------------------------------------------------------------


def _llm_temperature(llm: Any) -> float | None:
    temperature = getattr(llm, "temperature", None)
    if temperature is None:
        temperature = getattr(getattr(llm, "settings", None), "llm_temperature", None)
    return temperature if isinstance(temperature, (int, float)) else None


def _llm_model_name(llm: Any) -> str:
    for candidate in (getattr(llm, "model", None), getattr(getattr(llm, "settings", None), "llm_model", None)):
        if isinstance(candidate, str) and candidate:
            return candidate
    return type(llm).__name__


class Judge:
    """LLM-as-judge with prompt files, JSON verdicts and a verdict cache.

    ``llm``: an object with the :class:`neusym.llm.chat.LLM` protocol, configured for temperature
    0. ``model_name``: the cache-key model identity (default: ``llm.model``, ``llm.settings.llm_model``
    or the class name). ``cache_dir``: where ``judge_verdicts.sqlite`` lives; ``None`` = memory only.
    ``max_tokens``: reply budget per verdict (scoring-point verdicts get more per point).
    Counters: ``calls`` (LLM requests made), ``cache_hits``, ``prompt_tokens``, ``completion_tokens``.
    """

    def __init__(
        self,
        llm: Any,
        *,
        model_name: str | None = None,
        cache_dir: Path | str | None = None,
        max_tokens: int = 512,
    ):
        if not callable(getattr(llm, "chat", None)):
            raise TypeError(f"Judge needs an object with a chat() method, got {type(llm).__name__}")
        temperature = _llm_temperature(llm)
        if temperature not in (None, 0, 0.0):
            warnings.warn(
                f"the judge LLM runs at temperature {temperature}; verdicts are only reproducible at 0",
                stacklevel=2,
            )
        self.llm = llm
        self.model_name = model_name or _llm_model_name(llm)
        self.cache = VerdictCache(cache_dir)
        self.max_tokens = max_tokens
        self.calls = 0
        self.cache_hits = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Any, *, cache_dir: Path | str | None = None, max_tokens: int = 512) -> Judge:
        """The configured LLM (endpoint or offline model, see :func:`neusym.llm.chat.make_llm`) at
        temperature 0, caching under ``cache_dir`` (default ``<settings.home>/judge_cache``)."""
        from neusym.llm.chat import make_llm

        judge_settings = settings.model_copy(update={"llm_temperature": 0.0})
        where = cache_dir if cache_dir is not None else Path(settings.home) / "judge_cache"
        return cls(make_llm(judge_settings), model_name=settings.llm_model, cache_dir=where, max_tokens=max_tokens)

    def cache_key(self, prompt: JudgePrompt, messages: list[dict], schema: dict) -> str:
        """sha256 over model, prompt name and version, rendered messages and schema."""
        payload = json.dumps(
            {"model": self.model_name, "prompt": prompt.name, "version": prompt.version, "messages": messages, "schema": schema},
            sort_keys=True,
            ensure_ascii=False,
        )
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def ask(
        self,
        prompt_name: str,
        variables: dict[str, str],
        schema: dict,
        validate: Callable[[dict], Any],
        *,
        max_tokens: int | None = None,
    ) -> Any:
        """Render prompt ``prompt_name`` with ``variables``, get (cached or fresh) the JSON verdict
        under ``schema`` and return ``validate(verdict)``. Raises :class:`JudgeVerdictError` for a
        reply that does not parse or validate (not cached), :class:`JudgePromptError` for prompt
        problems, and whatever the LLM raises (e.g. ``LLMError``) on transport failures."""
        prompt = load_prompt(prompt_name)
        messages = prompt.render(variables)
        key = self.cache_key(prompt, messages, schema)
        cached = self.cache.get(key)
        if cached is not None:
            try:
                result = validate(cached)
            except JudgeVerdictError:
                logger.warning("ignoring an invalid cached judge verdict %s", key[:12])
            else:
                with self._lock:
                    self.cache_hits += 1
                return result
        reply = self.llm.chat(messages, json_schema=schema, max_tokens=max_tokens or self.max_tokens)
        with self._lock:
            self.calls += 1
            self.prompt_tokens += int(getattr(reply, "prompt_tokens", 0) or 0)
            self.completion_tokens += int(getattr(reply, "completion_tokens", 0) or 0)
        text = getattr(reply, "text", reply if isinstance(reply, str) else "")
        data = parse_json_object(text)
        result = validate(data)
        self.cache.put(key, data, model=self.model_name, prompt=prompt.name, version=prompt.version, raw_reply=text)
        return result

    # -- the three judgements -------------------------------------------------------------------

    def reference_answer(self, *, question: str, reference_answer: str, prediction: str) -> Verdict:
        """Is ``prediction`` a correct answer to ``question``, judged against ``reference_answer``?"""
        return self.ask(
            "reference_answer",
            {"question": question or "(not given)", "reference_answer": reference_answer, "prediction": prediction},
            REFERENCE_ANSWER_SCHEMA,
            _binary_validator("correct"),
        )

    def scoring_points(self, *, question: str, scoring_points: list[str], prediction: str) -> list[Verdict]:
        """For each scoring point, in order: does ``prediction`` mention / satisfy it?"""
        numbered = "\n".join(f"{i}. {point}" for i, point in enumerate(scoring_points, start=1))
        return self.ask(
            "scoring_points",
            {
                "question": question or "(not given)",
                "scoring_points": numbered,
                "count": str(len(scoring_points)),
                "prediction": prediction,
            },
            SCORING_POINTS_SCHEMA,
            _points_validator(len(scoring_points)),
            max_tokens=max(self.max_tokens, 160 * len(scoring_points) + 64),
        )

    def formula(self, *, question: str, reference_formula: str, predicted_formula: str) -> Verdict:
        """Is ``predicted_formula`` mathematically equivalent to ``reference_formula`` (LaTeX)?"""
        return self.ask(
            "formula",
            {
                "question": question or "(not given)",
                "reference_formula": reference_formula,
                "prediction": predicted_formula,
            },
            FORMULA_SCHEMA,
            _binary_validator("equivalent"),
        )


_WRAPPED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_WRAPPED_LOCK = threading.Lock()


def as_judge(judge: Any) -> Judge:
    """``judge`` itself when it is a :class:`Judge`; for a bare LLM object, one memory-cached
    :class:`Judge` per LLM object (reused across calls); :class:`JudgeUnavailableError` for ``None``."""
    if isinstance(judge, Judge):
        return judge
    if judge is None:
        raise JudgeUnavailableError("this evaluation function needs an LLM judge, and none is configured")
    if not callable(getattr(judge, "chat", None)):
        raise JudgeUnavailableError(f"not an LLM judge: {type(judge).__name__}")
    with _WRAPPED_LOCK:
        try:
            wrapped = _WRAPPED.get(judge)
            if wrapped is None:
                wrapped = _WRAPPED[judge] = Judge(judge)
        except TypeError:  # not weak-referenceable: no reuse across calls
            wrapped = Judge(judge)
    return wrapped


__all__ = [
    "FORMULA_SCHEMA",
    "REFERENCE_ANSWER_SCHEMA",
    "SCORING_POINTS_SCHEMA",
    "Judge",
    "JudgeError",
    "JudgePrompt",
    "JudgePromptError",
    "JudgeUnavailableError",
    "JudgeVerdictError",
    "Verdict",
    "VerdictCache",
    "as_judge",
    "load_prompt",
    "parse_json_object",
    "parse_prompt",
]
