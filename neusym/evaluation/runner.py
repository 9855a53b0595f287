"""``neusym eval run``: answer every question of an AirQA-Real file with one method.

Input (:func:`load_questions`): JSON Lines, one AirQA-Real item per line (paper App. A.1):
``uuid`` (required, unique), ``question`` (required), ``answer_format``, ``tags``, ``anchor_pdf``,
``reference_pdf`` (lists of paper UUIDs: our ``metadata.paper_id`` or the NeuSym-RAG id
``metadata.airqa_paper_id``), ``conference`` (e.g. ``["acl2023"]``) and ``evaluator`` (used by
scoring). A malformed line is a :class:`QuestionFileError` naming the file, the line and the reason.

Output (:func:`run_eval`): one JSON line per answered question, appended and flushed as soon as the
question is done::

    {"uuid", "method", "answer", "trajectory": [{thought, action, arguments, observation, ...}],
     "turns", "prompt_tokens", "completion_tokens", "cached_tokens", "seconds", "stop_reason",
     "timings", "paper_ids", "error"}

``timings``: seconds per phase of the answer (:mod:`neusym.telemetry`).

``error`` is null when the agent ran (even if it never answered: ``answer`` null, ``stop_reason``
``max_turns``) and a message when the item could not be run: a paper id not in the corpus, an LLM
backend failure, an unexpected exception. One bad item never stops the run.

Resuming: uuids that already have a line in the output file are skipped, so re-running the same
command after an interruption only answers the rest (a line cut off by a crash is ignored and its
question answered again). Items whose line has an ``error`` are re-run only with
``retry_errors=True`` (``--retry-errors``); the new line is appended and the last line of a uuid is
the one that counts. An output file written by another method is refused.

Concurrency: ``concurrency`` threads answer questions in parallel over one environment. The offline
model is one llama.cpp slot in this process, so its calls are serialized (and interleaving questions
defeats its prompt cache): concurrency > 1 is for OpenAI-compatible endpoints.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid as uuidlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from neusym.query.answer.config import FocusedConfig
from neusym.query.answer.cues import families_off
from neusym.query.agent.actions import Environment
from neusym.llm.chat import LLM, OpenAICompatibleLLM, make_llm
from neusym.query.agent.methods import Method, MethodError, get_method
from neusym.query.ask import ask
from neusym.errors import NeusymError
from neusym.settings import Settings

logger = logging.getLogger(__name__)

MAX_REPORTED_LINES = 20


class QuestionFileError(NeusymError):
    """A questions file that cannot be used: missing, or malformed lines (each named by line number)."""


class PredictionFileError(NeusymError):
    """A predictions file that cannot be used: malformed lines, or lines of another method."""


class ItemError(NeusymError):
    """A problem with one question that stops only that question (e.g. a paper id not in the corpus)."""


# --------------------------------------------------------------------------------------------
# Questions
# --------------------------------------------------------------------------------------------


@dataclass
class EvalQuestion:
    """One AirQA-Real item. ``line`` is its 1-based line number in ``path``; ``raw`` the parsed object."""

    uuid: str
    question: str
    answer_format: str | None = None
    tags: list[str] = field(default_factory=list)
    anchor_pdf: list[str] = field(default_factory=list)
    reference_pdf: list[str] = field(default_factory=list)
    conference: list[str] = field(default_factory=list)
    evaluator: Any = None
    line: int = 0
    path: str = ""
    raw: dict = field(default_factory=dict)

    @property
    def where(self) -> str:
        """``file:line (uuid ...)`` for error messages."""
        return f"{self.path}:{self.line} (uuid {self.uuid})"

    @property
    def paper_refs(self) -> list[tuple[str, str]]:
        """(field, id) for every anchor_pdf then reference_pdf id, first occurrence only."""
        seen: set[str] = set()
        out = []
        for name, ids in (("anchor_pdf", self.anchor_pdf), ("reference_pdf", self.reference_pdf)):
            for pid in ids:
                if pid not in seen:
                    seen.add(pid)
                    out.append((name, pid))
        return out


def _string_list(obj: dict, name: str, *, uuids: bool = False) -> list[str]:
    value = obj.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{name} must be a list of strings, got {json.dumps(value)[:80]}")
    if uuids:
        out = []
        for v in value:
            try:
                out.append(str(uuidlib.UUID(v.strip())))
            except ValueError:
                raise ValueError(f"{name} holds {v!r}, which is not a paper UUID") from None
        return out
    return [v.strip() for v in value if v.strip()]


def parse_question(obj: Any, *, line: int = 0, path: str = "") -> EvalQuestion:
    """Validate one decoded AirQA-Real item; raises ``ValueError`` with the reason (no location)."""
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    uid = obj.get("uuid")
    if not isinstance(uid, str) or not uid.strip():
        raise ValueError("missing or empty 'uuid' (a string)")
    question = obj.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ValueError("missing or empty 'question' (a string)")
    answer_format = obj.get("answer_format")
    if answer_format is not None and not isinstance(answer_format, str):
        raise ValueError("'answer_format' must be a string")
    return EvalQuestion(
        uuid=uid.strip(),
        question=question,
        answer_format=answer_format or None,
        tags=[t.lower() for t in _string_list(obj, "tags")],
        anchor_pdf=_string_list(obj, "anchor_pdf", uuids=True),
        reference_pdf=_string_list(obj, "reference_pdf", uuids=True),
        conference=_string_list(obj, "conference"),
        evaluator=obj.get("evaluator"),
        line=line,
        path=path,
        raw=obj,
    )


def load_questions(path: Path | str) -> list[EvalQuestion]:
    """All items of an AirQA-Real JSONL file, in file order (blank lines are skipped).

    Raises :class:`QuestionFileError` when the file is missing or any line is malformed (not JSON,
    missing uuid/question, ill-typed fields, paper ids that are not UUIDs, duplicate uuids); the
    message names every bad line as ``path:line: reason`` (the first 20).
    """
    path = Path(path)
    if not path.is_file():
        raise QuestionFileError(f"questions file {path} does not exist")
    problems: list[str] = []
    questions: list[EvalQuestion] = []
    first_line: dict[str, int] = {}
    with path.open(encoding="utf-8") as handle:
        for number, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                problems.append(f"{path}:{number}: not valid JSON ({exc.msg} at column {exc.colno})")
                continue
            try:
                item = parse_question(obj, line=number, path=str(path))
            except ValueError as exc:
                problems.append(f"{path}:{number}: {exc}")
                continue
            if item.uuid in first_line:
                problems.append(f"{path}:{number}: duplicate uuid {item.uuid} (first on line {first_line[item.uuid]})")
                continue
            first_line[item.uuid] = number
            questions.append(item)
    if problems:
        more = f"\n... and {len(problems) - MAX_REPORTED_LINES} more" if len(problems) > MAX_REPORTED_LINES else ""
        raise QuestionFileError(
            f"{len(problems)} malformed line(s) in {path}:\n" + "\n".join(problems[:MAX_REPORTED_LINES]) + more
        )
    return questions


# --------------------------------------------------------------------------------------------
# Predictions file
# --------------------------------------------------------------------------------------------


def read_predictions(path: Path | str, *, tolerate_partial_tail: bool = True) -> dict[str, dict]:
    """Predictions by uuid from a PRED JSONL file; the last line of a uuid wins. A missing file is empty.

    A last line without its newline that is not valid JSON (a run killed while writing) is ignored
    when ``tolerate_partial_tail``. Any other malformed line (not JSON, not an object, no ``uuid``)
    raises :class:`PredictionFileError` naming the file and line.
    """
    path = Path(path)
    if not path.exists():
        return {}
    out: dict[str, dict] = {}
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            if tolerate_partial_tail and number == len(lines) and not text.endswith("\n"):
                logger.warning("%s:%d: ignoring a cut-off last line", path, number)
                continue
            raise PredictionFileError(f"{path}:{number}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("uuid"), str) or not obj["uuid"].strip():
            raise PredictionFileError(f"{path}:{number}: a prediction must be a JSON object with a string 'uuid'")
        obj["_line"] = number
        out[obj["uuid"].strip()] = obj
    return out


# --------------------------------------------------------------------------------------------
# Paper ids
# --------------------------------------------------------------------------------------------


class PaperResolver:
    """Maps AirQA paper ids (``metadata.airqa_paper_id``) and our ids (``metadata.paper_id``) to our ids,
    querying the corpus snapshot of ``env`` read-only (results cached)."""

    def __init__(self, env: Environment):
        self.env = env
        self._cache: dict[str, str | None] = {}
        self._lock = threading.Lock()

    def _lookup(self, ids: list[str]) -> None:
        missing = [i for i in ids if i not in self._cache]
        if not missing:
            return
        quoted = ", ".join(f"'{i}'" for i in missing)  # validated UUID strings only
        result = self.env.run_sql(
            f"SELECT CAST(paper_id AS VARCHAR), CAST(airqa_paper_id AS VARCHAR) FROM metadata "
            f"WHERE paper_id IN ({quoted}) OR airqa_paper_id IN ({quoted})",
            max_rows=len(missing) * 4 + 10,
        )
        found: dict[str, str] = {}
        for paper_id, airqa_id in result.rows:
            found[str(paper_id)] = str(paper_id)
            if airqa_id:
                found.setdefault(str(airqa_id), str(paper_id))
        with self._lock:
            for i in missing:
                self._cache[i] = found.get(i)

    def resolve(self, question: EvalQuestion) -> list[str]:
        """Our paper ids for the question's anchor_pdf + reference_pdf (order kept, duplicates dropped).

        Raises :class:`ItemError` naming the question (file, line, uuid) and every id found in
        neither ``metadata.paper_id`` nor ``metadata.airqa_paper_id``.
        """
        refs = question.paper_refs
        if not refs:
            return []
        self._lookup([pid for _, pid in refs])
        unknown = [f"{pid} ({name})" for name, pid in refs if self._cache.get(pid) is None]
        if unknown:
            raise ItemError(
                f"{question.where}: paper id(s) not in the corpus (neither metadata.paper_id nor "
                f"metadata.airqa_paper_id): {', '.join(unknown)}"
            )
        return list(dict.fromkeys(self._cache[pid] for _, pid in refs))  # type: ignore[misc]


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------


class _SerialLLM:
    """Forwards ``chat`` to ``llm`` one call at a time (the offline model is one llama.cpp slot)."""

    def __init__(self, llm: Any):
        self._llm = llm
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llm, name)

    def chat(self, messages: list[dict], *, json_schema: dict | None = None, max_tokens: int | None = None):
        with self._lock:
            return self._llm.chat(messages, json_schema=json_schema, max_tokens=max_tokens)


@dataclass
class RunReport:
    """What :func:`run_eval` did: ``selected`` questions (after ``limit``), ``skipped`` (already in
    the output), ``answered`` (lines written without error), ``errors`` (lines written with an
    error), wall-clock ``seconds``."""

    method: str
    selected: int = 0
    skipped: int = 0
    answered: int = 0
    errors: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return {
            "method": self.method,
            "selected": self.selected,
            "skipped": self.skipped,
            "answered": self.answered,
            "errors": self.errors,
            "seconds": round(self.seconds, 3),
        }


def empty_record(question: EvalQuestion, method: Method) -> dict:
    """The output line of a question before it runs (every field present, nothing answered)."""
    return {
        "uuid": question.uuid,
        "method": method.name,
        "answer": None,
        "trajectory": [],
        "turns": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "cached_tokens": 0,
        "seconds": 0.0,
        "stop_reason": None,
        "timings": {},
        "paper_ids": [],
        "error": None,
    }


def answer_item(
    question: EvalQuestion,
    *,
    method: Method,
    settings: Settings,
    llm: LLM,
    env: Environment,
    resolver: PaperResolver,
    focused: FocusedConfig | None = None,
    cues_off: Iterable[str] = (),
) -> dict:
    """Answer one question and return its output line (never raises for the item's own problems:
    unknown paper ids, LLM failures and unexpected exceptions become ``error``). ``focused``: the
    focused route's configuration (default the shipped one); ``cues_off``: cue families turned off
    while it answers (:func:`neusym.query.answer.cues.families_off`, an ablation)."""
    started = time.monotonic()
    record = empty_record(question, method)
    try:
        paper_ids = resolver.resolve(question)
        record["paper_ids"] = paper_ids
        with families_off(cues_off):
            result = ask(
                question.question,
                settings=settings,
                llm=llm,
                paper_ids=paper_ids or None,
                answer_format=question.answer_format,
                env=env,
                method=method,
                conferences=question.conference or None,
                focused=focused,
            )
        data = result.to_dict()
        for key in ("answer", "trajectory", "turns", "prompt_tokens", "completion_tokens", "cached_tokens", "stop_reason",
                    "timings"):
            record[key] = data[key]
        if data.get("route"):  # method auto
            for key in ("route", "verification", "citations"):
                record[key] = data[key]
    except NeusymError as exc:
        message = str(exc)
        record["error"] = message if message.startswith(question.where) else f"{question.where}: {message}"
    except Exception as exc:  # noqa: BLE001 - one item must not stop the run
        logger.exception("question %s failed", question.uuid)
        record["error"] = f"{question.where}: internal error: {type(exc).__name__}: {exc}"
    record["seconds"] = round(time.monotonic() - started, 3)
    return record


def run_eval(
    questions_path: Path | str,
    out_path: Path | str,
    *,
    settings: Settings,
    method: Method | str | None = None,
    llm: LLM | None = None,
    concurrency: int = 1,
    limit: int | None = None,
    retry_errors: bool = False,
    env: Environment | None = None,
    on_start: Callable[[int], None] | None = None,
    on_item: Callable[[dict], None] | None = None,
    focused: FocusedConfig | None = None,
    cues_off: Iterable[str] = (),
) -> RunReport:
    """Answer the questions of ``questions_path`` with ``method`` and append one line each to ``out_path``.

    ``limit``: only the first K questions of the file (the same K on every resume);
    ``concurrency``: worker threads (LLM calls are serialized unless ``llm`` is an
    :class:`OpenAICompatibleLLM`); ``retry_errors``: also re-run uuids whose last line has an error;
    ``llm`` / ``env``: defaults :func:`make_llm(settings)` / an :class:`Environment` over
    ``settings`` (closed on return); ``on_start(n)`` is called with the number of questions to
    answer, ``on_item(record)`` after each line is written; ``focused``: the focused route's
    configuration (:class:`neusym.query.answer.config.FocusedConfig`; default the shipped one), for
    measuring a variant of it; ``cues_off``: cue families (:mod:`neusym.query.answer.cues`) turned off
    for every answer, to measure what a family is worth.

    Raises :class:`QuestionFileError` / :class:`PredictionFileError` for unusable files (before any
    question runs), :class:`MethodError` for an unknown method or a method whose store is missing,
    and ``ValueError`` for ``concurrency < 1``, ``limit < 0`` or an unknown cue family.
    """
    started = time.monotonic()
    method = get_method(method)
    cues_off = tuple(cues_off)
    with families_off(cues_off):  # an unknown family is refused before any question runs
        pass
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be 0 or more, got {limit}")
    questions = load_questions(questions_path)
    if limit is not None:
        questions = questions[:limit]
    out_path = Path(out_path)
    existing = read_predictions(out_path)
    for uid, rec in existing.items():
        if rec.get("method", method.name) != method.name:
            raise PredictionFileError(
                f"{out_path}:{rec['_line']}: uuid {uid} was answered with method {rec.get('method')!r}, not "
                f"{method.name!r}; write each method's predictions to its own file"
            )
    done = {uid for uid, rec in existing.items() if not (retry_errors and rec.get("error"))}
    todo = [q for q in questions if q.uuid not in done]
    report = RunReport(method=method.name, selected=len(questions), skipped=len(questions) - len(todo))
    if on_start:
        on_start(len(todo))
    if not todo:
        report.seconds = time.monotonic() - started
        return report
    own_env = env is None
    env = env or Environment(settings)
    try:
        if method.needs_vectorstore and not method.uses_database and not env.vectorstore_available():
            raise MethodError(f"method {method.name} needs the vectorstore: {env.vectorstore_schema()}")
        llm = llm or make_llm(settings)
        if concurrency > 1 and not isinstance(llm, OpenAICompatibleLLM):
            llm = _SerialLLM(llm)
        resolver = PaperResolver(env)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        write_lock = threading.Lock()
        with out_path.open("a", encoding="utf-8") as handle:
            if out_path.stat().st_size and not out_path.read_bytes().endswith(b"\n"):
                handle.write("\n")  # after a cut-off last line, start on a fresh line

            def work(question: EvalQuestion) -> None:
                record = answer_item(question, method=method, settings=settings, llm=llm, env=env, resolver=resolver,
                                     focused=focused, cues_off=cues_off)
                line = json.dumps(record, ensure_ascii=False, default=str)
                with write_lock:
                    handle.write(line + "\n")
                    handle.flush()
                    os.fsync(handle.fileno())
                    if record["error"]:
                        report.errors += 1
                    else:
                        report.answered += 1
                if on_item:
                    on_item(record)

            if concurrency == 1:
                for question in todo:
                    work(question)
            else:
                with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="neusym-eval") as pool:
                    for future in [pool.submit(work, q) for q in todo]:
                        future.result()
    finally:
        if own_env:
            env.close()
    report.seconds = time.monotonic() - started
    return report


__all__ = [
    "EvalQuestion",
    "ItemError",
    "PaperResolver",
    "PredictionFileError",
    "QuestionFileError",
    "RunReport",
    "answer_item",
    "empty_record",
    "load_questions",
    "parse_question",
    "read_predictions",
    "run_eval",
]
