"""The agent: ``POST /ask`` (streamed as server-sent events: start, step..., answer), ``GET
/ask/methods`` and ``POST /ask/json`` (one JSON answer at the end), and the pieces the OpenAI-compatible
routes (:mod:`neusym.interfaces.service.openai_compat`) and the MCP ``ask`` tool (:mod:`.mcp`) share:
:func:`check_ask` and :func:`run_agent`."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, AsyncIterator, Callable

import anyio
from fastapi import APIRouter, Depends, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, Response
from fastapi.sse import EventSourceResponse, ServerSentEvent

from neusym.errors import BusyError, NeusymError
from neusym.store.versions import NoCorpusVersion
from neusym.interfaces.service.models import AskRequest, ErrorResponse
from neusym.interfaces.service.papers import BadRequest, NotFound, paper_titles, parse_paper_id
from neusym.interfaces.service.routes.deps import service_state
from neusym.interfaces.service.state import AskTimeout, ServiceState

logger = logging.getLogger("neusym.interfaces.service")

router = APIRouter()
"""``POST /ask``, ``GET /ask/methods``, ``POST /ask/json``."""


def check_ask(body: AskRequest) -> AskRequest:
    """Refuse a blank question, an unknown method, unknown paper ids or both a shape and an answer-format
    sentence before anything runs."""
    from neusym.query.agent.methods import MethodError, get_method

    if not body.question.strip():
        raise BadRequest("question must not be blank")
    if body.shape is not None and body.answer_format is not None:
        raise BadRequest("give shape or answer_format, not both: they say the same thing")
    if body.method is not None:
        try:
            get_method(body.method)
        except MethodError as exc:
            raise BadRequest(str(exc)) from None
    ids = []
    for raw in body.paper_ids:
        try:
            ids.append(parse_paper_id(raw))
        except NotFound:
            raise BadRequest(f"paper_ids: {str(raw)[:80]!r} is not a paper id (a UUID)") from None
    body.paper_ids = ids
    return body


async def resolved_ask(body: AskRequest, state: ServiceState = Depends(service_state)) -> AskRequest:
    """The body of ``POST /ask`` and ``/ask/json`` checked (:func:`check_ask`), its paper ids known in
    the served version (else :class:`NotFound`) and room in the LLM's queue (else :class:`BusyError`)."""
    body = check_ask(body)
    if body.paper_ids:
        known = await state.paper_titles(body.paper_ids)
        missing = [p for p in body.paper_ids if p not in known]
        if missing:
            raise NotFound(f"unknown paper id(s) in this corpus version: {', '.join(missing)}")
    state.llm.check_room()  # a full queue is a 503 before anything starts (or a stream opens)
    return body


def run_agent(state: ServiceState, body: AskRequest, on_event: Callable[[str, dict], None],
              cancel: threading.Event) -> dict:
    """One agent run of the app's ``state``: waits for the LLM (:class:`LLMSlots`), then answers on the
    served version (held until it ends) and returns the enriched answer. ``cancel`` set (the client
    went away) stops it at its next token, SQL query or step and returns ``{}``; past
    ``NEUSYM_AGENT_MAX_SECONDS`` it stops with :class:`AskTimeout`."""
    from neusym.llm.chat import RunCancelled
    from neusym.query.agent.actions import Environment
    from neusym.query.agent.methods import DEFAULT_METHOD
    from neusym.query.ask import ask

    class _Stop(Exception):
        pass

    def on_step(step: Any) -> None:
        if cancel.is_set():
            raise _Stop()
        on_step.turn += 1
        on_event("step", {"index": on_step.turn, **step.to_dict()})

    on_step.turn = 0
    settings = state.settings
    method = body.method or DEFAULT_METHOD
    with state.llm.hold(cancel, on_queued=lambda running, waiting: on_event(
            "queued", {"running": running, "waiting": waiting})) as held:
        if not held:
            return {}
        timed_out = threading.Event()

        def time_limit() -> None:
            timed_out.set()
            cancel.set()

        timer = threading.Timer(settings.agent_max_seconds, time_limit)
        timer.daemon = True
        timer.start()
        try:
            with state.holder.use() as served:
                on_event("start", {"version": served.number, "question": body.question, "method": method,
                                   "paper_ids": body.paper_ids})
                env = Environment(settings, version=served.version, db_schema=served.agent_schema)
                try:
                    result = ask(body.question, settings=settings, method=method, paper_ids=body.paper_ids or None,
                                 answer_format=body.answer_format, shape=body.shape, env=env, on_step=on_step,
                                 cancel=cancel)
                except (_Stop, RunCancelled):
                    if timed_out.is_set():
                        raise AskTimeout(f"the answer was stopped after {settings.agent_max_seconds:g} s "
                                         "(NEUSYM_AGENT_MAX_SECONDS); ask a narrower question or name the "
                                         "paper") from None
                    return {}
                finally:
                    env.close()
                out = {"version": served.number, **result.to_dict()}
                pids = {str(c.get("paper_id")) for c in out.get("citations") or []
                        if isinstance(c, dict) and c.get("paper_id")}
                titles: dict[str, str] = {}
                if pids:
                    cur = served.cursor()
                    try:
                        titles = paper_titles(cur, [p for p in pids if _is_uuid(p)])
                    finally:
                        cur.close()
                return enrich_answer(out, titles)
        finally:
            timer.cancel()


@router.post("/ask", response_class=EventSourceResponse, tags=["ask"],
             responses={200: {"description": "Server-sent events: `queued` {running, waiting} while other runs hold "
                                             "the model, `start` {version, question, method, paper_ids}, one `step` "
                                             "per agent turn (thought, action, arguments, observation, ...), then "
                                             "`answer` (the JSON answer, as /ask/json) or `error` {detail}."},
                        503: {"model": ErrorResponse, "description": "The queue for the LLM is full (Retry-After)."}})
async def ask(body: AskRequest = Depends(resolved_ask),
              state: ServiceState = Depends(service_state)) -> AsyncIterator[ServerSentEvent]:
    """Answer a question with the agent, streamed step by step as server-sent events (an answer
    can take a minute on the offline model; each step is sent as soon as it is done, and
    keep-alive comments flow meanwhile). Unknown methods and paper ids are refused (400/404)
    and a full queue for the LLM (``NEUSYM_ASK_QUEUE_MAX`` runs waiting) is a 503 with
    ``Retry-After``, before the stream starts. A client that disconnects cancels its run."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue = asyncio.Queue()
    cancel = threading.Event()

    def emit(kind: str, data: dict) -> None:
        loop.call_soon_threadsafe(events.put_nowait, (kind, data))

    def work() -> None:
        try:
            answer = run_agent(state, body, emit, cancel)
            if answer:
                emit("answer", answer)
        except BusyError as exc:
            emit("error", {"detail": str(exc), "retry_after": exc.retry_after_s})
        except NeusymError as exc:
            emit("error", {"detail": str(exc)})
        except Exception as exc:  # noqa: BLE001 - reported to the client without a traceback
            logger.exception("agent run failed")
            emit("error", {"detail": f"internal error ({type(exc).__name__}); the server log has the details"})
        finally:
            emit("end", {})

    task = asyncio.ensure_future(anyio.to_thread.run_sync(work, limiter=state.limiter("ask")))
    try:
        while True:
            kind, data = await events.get()
            if kind == "end":
                break
            yield ServerSentEvent(event=kind, data=data)
    finally:
        cancel.set()  # a client that went away stops the run at its next token, query or step
        if task.done() and not task.cancelled() and task.exception() is not None:
            logger.error("agent task: %s", task.exception())


@router.get("/ask/methods", tags=["ask"])
async def ask_methods() -> list[dict]:
    """The agent methods ``POST /ask`` accepts: ``[{"name", "description", "default", "baseline"}]``
    (neusym.query.agent.methods); ``baseline``: one of the paper's comparison methods, kept for evaluation
    (``neusym eval run --method``) and left out of the page's menu."""
    from neusym.query.agent.methods import DEFAULT_METHOD, METHODS

    return [{"name": m.name, "description": getattr(m, "summary", ""), "default": m.name == DEFAULT_METHOD,
             "baseline": m.name not in (DEFAULT_METHOD, "neusym")} for m in METHODS.values()]


@router.post("/ask/json", tags=["ask"],
             responses={503: {"model": ErrorResponse, "description": "The queue for the LLM is full, or the wait "
                                                                     "for it ran out (Retry-After)."}})
async def ask_json(request: Request, body: AskRequest = Depends(resolved_ask),
                   state: ServiceState = Depends(service_state)) -> Response:
    """The same agent run as ``POST /ask``, answered once at the end as one JSON object:
    ``answer``, ``trajectory``, ``turns``, tokens, ``seconds``, ``stop_reason``, ``version`` and,
    when the agent gives them, ``route``, ``verification`` and ``citations`` (each with a
    ``page_image`` URL when it names a page). A failing LLM is a 502 with its message; a full
    queue or a run past ``NEUSYM_AGENT_MAX_SECONDS`` a 503. A client that disconnects cancels
    its run (checked every 0.25 s)."""
    from neusym.llm.chat import LLMError

    try:
        answer = await state.run_until_disconnect("ask", request,
                                                  lambda cancel: run_agent(state, body, lambda k, d: None, cancel))
    except LLMError as exc:
        return JSONResponse({"detail": str(exc)}, status_code=502)
    except (NoCorpusVersion, BusyError, AskTimeout):
        raise
    except NeusymError as exc:
        return JSONResponse({"detail": str(exc)}, status_code=400)
    if isinstance(answer, Response):  # the client went away (499)
        return answer
    return JSONResponse(jsonable_encoder(answer))


def page_image_path(paper_id: str, page_number: int, bbox: Any = None) -> str:
    """The relative URL of a page image (what a citation links to): ``papers/ID/pages/N.png[?bbox=...]``."""
    url = f"papers/{paper_id}/pages/{int(page_number)}.png"
    if bbox:
        url += "?bbox=" + ",".join(f"{float(v):g}" for v in bbox)
    return url


def enrich_answer(result: dict, titles: dict[str, str] | None = None) -> dict:
    """Add ``page_image`` (relative URL of the cited page with the box) to each citation of an
    agent answer that names a paper (a UUID) and a page, and the paper title where the citation has none. Citations are
    optional (older agents have no ``citations`` key); the dict is changed in place and returned."""
    for c in result.get("citations") or []:
        if not isinstance(c, dict):
            continue
        pid, page = c.get("paper_id"), c.get("page_number")
        if pid and _is_uuid(str(pid)) and isinstance(page, int) and not isinstance(page, bool) and page >= 1:
            box = c.get("bounding_box")
            ok = isinstance(box, (list, tuple)) and len(box) == 4 and all(isinstance(v, (int, float)) for v in box)
            c["page_image"] = page_image_path(str(pid), page, box if ok else None)
        if titles and pid and not c.get("title"):
            c["title"] = titles.get(str(pid))
    return result


def _is_uuid(value: str) -> bool:
    try:
        parse_paper_id(value)
        return True
    except NotFound:
        return False
