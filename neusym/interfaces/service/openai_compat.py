"""An OpenAI-compatible face of the agent: ``GET /v1/models`` and ``POST /v1/chat/completions``.

Any OpenAI client (the ``openai`` SDK with ``base_url="http://HOST:8000/v1"``, chat front ends,
LangChain, ...) can ask the corpus questions; the API key is the service's own (``Authorization:
Bearer KEY``, as every API route accepts). One model per agent method, ``neusym-<method>``
(:data:`neusym.query.agent.methods.METHODS`; ``neusym-auto`` is the router, the default of
``POST /ask``). A completion is one agent run, exactly as ``POST /ask/json`` runs it (same LLM slots,
queue, time limit and cancellation when the client goes away); its text is the answer followed by
numbered references, and the message carries the structured ``citations`` and a ``neusym`` block
(corpus version, route, verification, method, seconds). docs/openai_endpoint.md has examples.

Conversations: the question is the last user message. Papers cited by earlier assistant turns
(their reference lines end in ``(paper <uuid>)``) become the question's ``paper_ids``, so a follow-up
("and how many figures does it have?") stays on the paper the previous answer was about; a
non-standard body field ``paper_ids`` (``extra_body`` in the SDK) overrides that. Nothing else of the
history reaches the agent, and system messages are ignored.

Errors on ``/v1`` paths are OpenAI-shaped, ``{"error": {"message", "type", "param", "code"}}``
(:func:`use_openai_errors`), so OpenAI clients raise their usual exceptions with the message; the
rest of the service keeps ``{"detail": ...}``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import re
import threading
import time
import uuid
from typing import Any, AsyncIterator, Callable, Literal

import anyio
from fastapi import APIRouter, FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from neusym.errors import BusyError, NeusymError
from neusym.interfaces.service.models import AskRequest
from neusym.interfaces.service.papers import NotFound, public_base_url
from neusym.store.versions import NoCorpusVersion

logger = logging.getLogger("neusym.interfaces.service")

MODEL_PREFIX = "neusym-"
"""Model ids are ``neusym-<method name>``."""
MAX_QUESTION_CHARS = 4000
"""Longest question (the last user message), as ``POST /ask``."""
MAX_PAPERS = 20
"""Most papers one question may focus on (``AskRequest.paper_ids``)."""
KEEPALIVE_S = 10.0
"""Seconds between ``: keep-alive`` comment lines of a stream while the agent runs."""
DISCONNECT_POLL_S = 0.25
"""How often a stream checks whether its run has ended (and a keep-alive line is due)."""

_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_REFERENCE_LINE = re.compile(rf"\[\d+\].*\(paper ({_UUID})\)")
"""One reference line (blanks around it stripped first): ``[n] ... (paper <uuid>)``; matched line by line
with ``fullmatch``, so no quantifier runs across lines (a history of newlines stays linear)."""

_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 405: "invalid_request_error", 413: "invalid_request_error",
                422: "invalid_request_error", 429: "rate_limit_error", 502: "upstream_error",
                503: "service_unavailable"}


# ------------------------------------------------------------------------------ request shapes
class ChatMessage(BaseModel):
    """One message of ``messages``: ``role`` and ``content`` (a string, or a list of ``{"type": "text",
    "text"}`` parts); other fields (``name``, ``tool_calls``, ...) are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None


class ChatCompletionRequest(BaseModel):
    """``POST /v1/chat/completions``: OpenAI's body. ``model`` (see ``GET /v1/models``), ``messages``,
    ``stream``, ``stream_options.include_usage``; ``n`` must be 1 or absent; ``tools``/``functions``
    and a ``response_format`` other than text are refused; sampling fields (``temperature``,
    ``max_tokens``, ``top_p``, ``stop``, ``seed``, ``user``, ...) are accepted and ignored.
    Non-standard: ``paper_ids``, the papers to focus on (overrides those taken from the history)."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(max_length=200)
    messages: list[ChatMessage]
    stream: bool | None = False
    stream_options: dict[str, Any] | None = None
    n: int | None = None
    tools: list[Any] | None = None
    functions: list[Any] | None = None
    response_format: dict[str, Any] | None = None
    paper_ids: list[str] | None = Field(None, max_length=MAX_PAPERS,
                                        description="neusym: papers to focus on (metadata.paper_id UUIDs); "
                                                    "default: the papers cited by earlier assistant turns.")


class ChatRequestError(Exception):
    """A chat request this endpoint refuses: answered ``status`` with the OpenAI error shape."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None, status: int = 400):
        super().__init__(message)
        self.param, self.code, self.status = param, code, status

    def response(self) -> JSONResponse:
        """The error as an OpenAI-shaped JSON response."""
        return openai_error(self.status, str(self), param=self.param, code=self.code)


# ------------------------------------------------------------------------------ errors
def openai_error(status: int, message: str, *, type: str | None = None, param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None) -> JSONResponse:
    """``{"error": {"message", "type", "param", "code"}}`` with ``status`` (``type`` defaults by status:
    invalid_request_error, authentication_error, not_found_error, service_unavailable, ...)."""
    kind = type or _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}},
                        status_code=status, headers=headers)


def _route_path(request: Request) -> str:
    path = request.url.path
    root = request.scope.get("root_path") or ""
    return path[len(root):] if root and path.startswith(root) else path


def _is_openai_path(request: Request) -> bool:
    path = _route_path(request)
    return path == "/v1" or path.startswith("/v1/")


def use_openai_errors(app: FastAPI) -> None:
    """Make the app's exception handlers answer ``/v1`` paths in the OpenAI error shape.

    Each registered handler is wrapped: on a ``/v1`` path its ``{"detail": msg[, "error": code]}``
    JSON becomes ``{"error": {"message": msg, "type", "param": null, "code": code}}`` with the same
    status and headers (``Retry-After``, ``WWW-Authenticate``); other paths are untouched. Call it
    after the handlers are registered and before the app serves its first request. Responses made
    outside the handlers (the 413 of an over-large body, the 500 of an unexpected error) keep
    ``{"detail"}``."""
    for key, handler in list(app.exception_handlers.items()):
        app.exception_handlers[key] = _openai_shaped(handler)


def _openai_shaped(handler: Callable) -> Callable:
    async def handle(request: Request, exc: Exception) -> Response:
        response = handler(request, exc)
        if inspect.isawaitable(response):
            response = await response
        if not _is_openai_path(request) or not isinstance(response, JSONResponse):
            return response
        try:
            body = json.loads(bytes(response.body))
        except ValueError:
            return response
        if not isinstance(body, dict) or "detail" not in body:
            return response
        detail = body["detail"] if isinstance(body["detail"], str) else json.dumps(body["detail"])
        code = body.get("error") if isinstance(body.get("error"), str) else None
        if code is None and response.status_code == 401:
            code = "invalid_api_key"
        headers = {k: v for k, v in response.headers.items() if k.lower() not in ("content-length", "content-type")}
        return openai_error(response.status_code, detail, code=code, headers=headers)

    return handle


# ------------------------------------------------------------------------------ conversation
def model_ids() -> list[str]:
    """The model ids: ``neusym-<method>`` for every agent method, the default method (``auto``) first."""
    from neusym.query.agent.methods import DEFAULT_METHOD, METHODS

    names = sorted(METHODS, key=lambda n: n != DEFAULT_METHOD)
    return [MODEL_PREFIX + n for n in names]


def method_of(model: str) -> str | None:
    """The agent method a model id names (``neusym-auto`` -> ``auto``; case and surrounding blanks
    ignored), or None for an unknown model."""
    from neusym.query.agent.methods import METHODS

    name = str(model).strip().lower()
    if not name.startswith(MODEL_PREFIX):
        return None
    method = name[len(MODEL_PREFIX):]
    return method if method in METHODS else None


def message_text(message: dict, index: int) -> str:
    """The text of one message: its string content, or its text parts joined by newlines (None: "").
    Raises :class:`ChatRequestError` for a part that is not text (images, audio, files)."""
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for part in content:
        kind = part.get("type")
        if kind != "text" or not isinstance(part.get("text"), str):
            raise ChatRequestError(f"messages[{index}]: only text content is supported, not a {kind!r} part",
                                   param=f"messages[{index}].content")
        texts.append(part["text"])
    return "\n".join(texts)


def chat_question(messages: list[dict]) -> tuple[str, int]:
    """``(question, index)``: the text of the last user message and its position. Raises
    :class:`ChatRequestError` (400) when there is no user message, the question is blank or longer
    than :data:`MAX_QUESTION_CHARS`, or any message has a non-text part."""
    texts = [message_text(m, i) for i, m in enumerate(messages)]
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    if not users:
        raise ChatRequestError("messages has no user message: the last user message is the question",
                               param="messages")
    last = users[-1]
    question = texts[last].strip()
    if not question:
        raise ChatRequestError(f"the question (messages[{last}], the last user message) must not be blank",
                               param=f"messages[{last}].content")
    if len(question) > MAX_QUESTION_CHARS:
        raise ChatRequestError(f"the question (messages[{last}]) has {len(question)} characters; at most "
                               f"{MAX_QUESTION_CHARS} are allowed", param=f"messages[{last}].content")
    return question, last


def cited_paper_ids(messages: list[dict], before: int | None = None) -> list[str]:
    """Paper ids named by the reference lines (``[n] ... (paper <uuid>)``) of the assistant messages
    before position ``before`` (default: all), most recent turn first, without repeats, at most
    :data:`MAX_PAPERS`."""
    found: list[str] = []
    upto = len(messages) if before is None else before
    for i in range(upto - 1, -1, -1):
        m = messages[i]
        if m.get("role") != "assistant":
            continue
        try:
            text = message_text(m, i)
        except ChatRequestError:
            continue
        for line in _reference_candidates(text):
            m = _REFERENCE_LINE.fullmatch(line.strip())
            if m is None:
                continue
            pid = m.group(1).lower()
            if pid not in found:
                found.append(pid)
    return found[:MAX_PAPERS]


def _reference_candidates(text: str) -> list[str]:
    """The lines of ``text`` that contain "(paper ": found from those occurrences, so a history of a
    million short lines costs as much as its reference lines, not one step per line."""
    out: list[str] = []
    at = text.find("(paper ")
    while at >= 0:
        start = text.rfind("\n", 0, at) + 1
        end = text.find("\n", at)
        end = len(text) if end < 0 else end
        out.append(text[start:end])
        at = text.find("(paper ", end)
    return out


# ------------------------------------------------------------------------------ answer text
def answer_value_text(value: Any) -> str:
    """The answer as text: a string as it is, anything else (number, list, dict) as one-line JSON
    (``["a", "b"]``); None (the agent gave no answer) is empty."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def reference_line(index: int, citation: dict) -> str:
    """``[n] <title>, p. <page> — "<quote>" (paper <paper_id>)``: parts the citation lacks are left
    out; the quote's line breaks and runs of blanks become one space."""
    where = [str(citation.get("title") or "untitled paper")]
    page = citation.get("page_number")
    if isinstance(page, int) and not isinstance(page, bool):
        where.append(f"p. {page}")
    line = f"[{index}] " + ", ".join(where)
    quote = " ".join(str(citation.get("quote") or "").split())
    if quote:
        line += f' — "{quote}"'
    if citation.get("paper_id"):
        line += f" (paper {citation['paper_id']})"
    return line


def answer_parts(answer: dict) -> tuple[str, str]:
    """``(head, references)`` of an agent answer: the answer text with ``[1][2]...`` markers (or a
    note naming the stop reason when there is no answer), and the numbered reference lines after a
    blank line (empty without citations). The completion's content is ``head + references``."""
    citations = [c for c in answer.get("citations") or [] if isinstance(c, dict)]
    head = answer_value_text(answer.get("answer"))
    if not head.strip():
        head = f"(no answer: the agent stopped with {answer.get('stop_reason') or 'no answer'})"
    if not citations:
        return head, ""
    head += " " + "".join(f"[{i}]" for i in range(1, len(citations) + 1))
    return head, "\n\n" + "\n".join(reference_line(i, c) for i, c in enumerate(citations, start=1))


def structured_citations(answer: dict, base_url: str) -> list[dict]:
    """The answer's citation dicts, each with its ``index`` (the ``[n]`` of the text) and
    ``page_image`` made absolute against ``base_url`` (:func:`~neusym.interfaces.service.papers.public_base_url`,
    ending in ``/``)."""
    out = []
    for i, c in enumerate((c for c in answer.get("citations") or [] if isinstance(c, dict)), start=1):
        item = {"index": i, **c}
        if item.get("page_image"):
            item["page_image"] = base_url + str(item["page_image"]).lstrip("/")
        out.append(item)
    return out


def neusym_block(answer: dict, ask: AskRequest) -> dict:
    """The ``neusym`` field of a completion: ``version``, ``route``, ``verification``, ``method``,
    ``seconds``, ``stop_reason`` and the ``paper_ids`` the question was focused on."""
    return {"version": answer.get("version"), "route": answer.get("route"), "verification": answer.get("verification"),
            "method": answer.get("method") or ask.method, "seconds": answer.get("seconds"),
            "stop_reason": answer.get("stop_reason"), "paper_ids": list(ask.paper_ids)}


def _usage(answer: dict) -> dict:
    prompt = int(answer.get("prompt_tokens") or 0)
    completion = int(answer.get("completion_tokens") or 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


# ------------------------------------------------------------------------------ the router
def openai_router(state: Any, run_agent: Callable[[AskRequest, Callable[[str, dict], None], threading.Event], dict],
                  check_ask: Callable[[AskRequest], AskRequest]) -> APIRouter:
    """The routes ``GET /v1/models``, ``GET /v1/models/{model}`` and ``POST /v1/chat/completions``
    (include it behind the app's authentication: the API key dependency applies).

    ``state``: the app's :class:`~neusym.interfaces.service.state.ServiceState` (pools, LLM slots,
    served version); ``run_agent(ask, on_event, cancel) -> dict``: one agent run returning the
    enriched answer (``{}`` when cancelled), as ``POST /ask/json`` uses it; ``check_ask(ask)``: the
    checks of ``POST /ask`` (blank question, method, paper id syntax; raises ``BadRequest``).

    Errors: 404 ``model_not_found`` for an unknown model; 400 for no user message, a blank or too
    long question, ``n`` > 1, tools, non-text content, malformed paper ids; 404 for explicit
    ``paper_ids`` not in the corpus (ids taken from the history that are not there are dropped);
    503 with ``Retry-After`` when the LLM's queue is full or nothing is published; 502 when the
    LLM fails (non-streamed; a stream ends with a chunk saying the error)."""
    router = APIRouter(prefix="/v1", tags=["openai"])
    created = int(time.time())

    def model_card(model: str) -> dict:
        return {"id": model, "object": "model", "created": created, "owned_by": "neusym"}

    @router.get("/models")
    async def list_models() -> dict:
        """The models, in OpenAI's list shape: ``{"object": "list", "data": [{"id", "object": "model",
        "created", "owned_by": "neusym"}]}``; ``neusym-auto`` (the router) first, then
        ``neusym-<method>`` for every agent method."""
        return {"object": "list", "data": [model_card(m) for m in model_ids()]}

    @router.get("/models/{model}", responses={404: {"description": "Unknown model (OpenAI error shape)."}})
    async def retrieve_model(model: str) -> Response:
        """One model card; 404 ``model_not_found`` for an unknown id."""
        if method_of(model) is None:
            return _unknown_model(model).response()
        return JSONResponse(model_card(model.strip().lower()))

    async def prepared(body: ChatCompletionRequest) -> AskRequest:
        method = method_of(body.model)
        if method is None:
            raise _unknown_model(body.model)
        if body.n not in (None, 1):
            raise ChatRequestError(f"n must be 1 (one answer per request), got {body.n}", param="n")
        if body.tools or body.functions:
            raise ChatRequestError("tools and function calling are not supported: the agent chooses its own "
                                   "actions", param="tools" if body.tools else "functions")
        kind = (body.response_format or {}).get("type")
        if kind not in (None, "text"):
            raise ChatRequestError(f"response_format {kind!r} is not supported (answers are text with references)",
                                   param="response_format")
        messages = [m.model_dump() for m in body.messages]
        question, last = chat_question(messages)
        explicit = body.paper_ids is not None
        ids = list(body.paper_ids or []) if explicit else cited_paper_ids(messages, before=last)
        ask = check_ask(AskRequest(question=question, paper_ids=ids, method=method))
        if ask.paper_ids:
            known = await state.paper_titles(ask.paper_ids)
            missing = [p for p in ask.paper_ids if p not in known]
            if missing and explicit:
                raise NotFound(f"unknown paper id(s) in this corpus version: {', '.join(missing)}")
            ask.paper_ids = [p for p in ask.paper_ids if p in known]  # a paper since removed is dropped
        state.llm.check_room()  # a full queue is a 503 before anything starts (or a stream opens)
        return ask

    def start(ask: AskRequest, cancel: threading.Event) -> asyncio.Future:
        task = asyncio.ensure_future(anyio.to_thread.run_sync(lambda: run_agent(ask, lambda k, d: None, cancel),
                                                              limiter=state.limiter("ask")))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved: never "never retrieved"
        return task

    @router.post("/chat/completions",
                 responses={200: {"content": {"text/event-stream": {}},
                                  "description": "A chat.completion object, or with stream=true server-sent "
                                                 "chat.completion.chunk events ending in [DONE]."},
                            502: {"description": "The LLM failed (OpenAI error shape)."},
                            503: {"description": "The LLM's queue is full, or no corpus is published (Retry-After)."}})
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        """One agent answer as an OpenAI chat completion (module docstring: the question is the last
        user message, papers cited by earlier assistant turns become its ``paper_ids`` unless the
        body names ``paper_ids``).

        ``choices[0].message``: ``content`` is the answer (strings as they are, other values as
        one-line JSON) with ``[1][2]`` markers, then a blank line and ``[n] <title>, p. <page> —
        "<quote>" (paper <id>)`` lines; ``citations`` the structured citations (``index``, paper_id,
        title, page_number, bounding_box, table_name, column_name, primary_key, quote, absolute
        ``page_image``); ``neusym`` {version, route, verification, method, seconds, stop_reason,
        paper_ids}. Both also sit at the top level of the object. ``usage`` counts the agent's LLM
        tokens (0 for answers the router gives without the LLM).

        ``stream: true``: ``text/event-stream`` of ``data: {chat.completion.chunk}`` lines: the role,
        ``: keep-alive`` comments every :data:`KEEPALIVE_S` s while the agent runs, the answer, the
        references, a last chunk with ``finish_reason: "stop"`` and ``citations``/``neusym`` (in
        ``delta`` and at the top level), a usage chunk when ``stream_options.include_usage``, then
        ``data: [DONE]``. An error after the stream opened is a last chunk saying it. A client that
        goes away cancels the run."""
        try:
            ask = await prepared(body)
        except ChatRequestError as exc:
            return exc.response()
        model = body.model
        base_url = public_base_url(request.scope, state.settings.public_url)
        if body.stream:
            usage = bool((body.stream_options or {}).get("include_usage"))
            return StreamingResponse(_stream(ask, model, base_url, usage), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        from neusym.llm.chat import LLMError

        try:
            answer = await state.run_until_disconnect("ask", request,
                                                      lambda cancel: run_agent(ask, lambda k, d: None, cancel))
        except LLMError as exc:
            return openai_error(502, str(exc), code="llm_error")
        except NeusymError as exc:
            if _has_handler(request, exc):  # busy, time limit, no corpus: answered as everywhere (503)
                raise
            return openai_error(400, str(exc))
        if isinstance(answer, Response):  # the client went away (499)
            return answer
        if not answer:  # the run was cancelled
            return Response(status_code=499)
        head, refs = answer_parts(answer)
        citations, extra = structured_citations(answer, base_url), neusym_block(answer, ask)
        payload = {"id": _completion_id(), "object": "chat.completion", "created": int(time.time()), "model": model,
                   "system_fingerprint": _fingerprint(answer),
                   "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                                "message": {"role": "assistant", "content": head + refs, "refusal": None,
                                            "citations": citations, "neusym": extra}}],
                   "usage": _usage(answer), "citations": citations, "neusym": extra}
        return JSONResponse(jsonable_encoder(payload))

    async def _stream(ask: AskRequest, model: str, base_url: str, include_usage: bool) -> AsyncIterator[str]:
        cid, created_at = _completion_id(), int(time.time())

        def chunk(delta: dict, finish: str | None = None, **top: Any) -> str:
            data = {"id": cid, "object": "chat.completion.chunk", "created": created_at, "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}], **top}
            return "data: " + json.dumps(jsonable_encoder(data), ensure_ascii=False) + "\n\n"

        yield chunk({"role": "assistant", "content": ""})
        cancel = threading.Event()
        task = start(ask, cancel)
        try:
            beat = time.monotonic()
            while True:
                done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
                if done:
                    break
                if time.monotonic() - beat >= KEEPALIVE_S:
                    beat = time.monotonic()
                    yield ": keep-alive\n\n"
        finally:
            cancel.set()  # a client that went away stops the run at its next token, query or step
        try:
            answer = task.result()
        except Exception as exc:  # noqa: BLE001 - said in the stream, without a traceback
            yield chunk({"content": f"Error: {_error_text(exc)}"}, "stop")
            yield "data: [DONE]\n\n"
            return
        if not answer:  # cancelled: nobody is there to read more
            return
        head, refs = answer_parts(answer)
        yield chunk({"content": head})
        if refs:
            yield chunk({"content": refs})
        citations, extra = structured_citations(answer, base_url), neusym_block(answer, ask)
        yield chunk({"citations": citations, "neusym": extra}, "stop", citations=citations, neusym=extra,
                    system_fingerprint=_fingerprint(answer))
        if include_usage:
            yield ("data: " + json.dumps({"id": cid, "object": "chat.completion.chunk", "created": created_at,
                                          "model": model, "choices": [], "usage": _usage(answer)}) + "\n\n")
        yield "data: [DONE]\n\n"

    return router


def _unknown_model(model: str) -> ChatRequestError:
    return ChatRequestError(f"the model {str(model)[:200]!r} does not exist; models: {', '.join(model_ids())} "
                            "(GET /v1/models)", param="model", code="model_not_found", status=404)


def _has_handler(request: Request, exc: Exception) -> bool:
    handlers = getattr(request.app, "exception_handlers", {}) or {}
    return any(cls in handlers for cls in type(exc).__mro__ if cls not in (Exception, BaseException))


def _error_text(exc: Exception) -> str:
    if isinstance(exc, NoCorpusVersion):
        return f"no corpus to serve yet: {exc}"
    if isinstance(exc, BusyError):
        return f"{exc} (retry after {exc.retry_after_s} s)"
    if isinstance(exc, NeusymError):
        return str(exc)
    logger.exception("agent run failed", exc_info=exc)
    return f"internal error ({type(exc).__name__}); the server log has the details"


def _completion_id() -> str:
    return "chatcmpl-" + uuid.uuid4().hex


def _fingerprint(answer: dict) -> str | None:
    return f"neusym-corpus-v{answer['version']}" if answer.get("version") is not None else None
