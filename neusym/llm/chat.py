"""Chat LLM backends for the agent: an OpenAI-compatible endpoint or the offline GGUF in-process.

Both implement the :class:`LLM` protocol: ``chat(messages, *, json_schema=None, max_tokens=None)``
with OpenAI-style messages (``{"role": "system"|"user"|"assistant", "content": str | list}``) and
return an :class:`LLMReply`. When ``json_schema`` is given the reply is constrained to it (OpenAI
``response_format={"type": "json_schema", ...}``; llama.cpp turns the same request into a grammar).

:func:`make_llm` picks the backend from settings: ``NEUSYM_LLM_BASE_URL`` set → endpoint, else the
offline Qwen2.5-Coder-1.5B-Instruct GGUF via ``xllamacpp`` (loaded once per process).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol, runtime_checkable

from neusym.errors import NeusymError
from neusym.telemetry import llm_request
from neusym.settings import Settings


ABORT_POLL_S = 0.1
"""How often an abortable endpoint call (:meth:`OpenAICompatibleLLM.chat` with ``should_stop``) asks
whether to stop."""
CHARS_PER_TOKEN = 4
"""How many characters one LLM token is taken to be where budgets are estimated before a call
(observations, rerank candidates, enrichment inputs); the backends report the real counts."""


class LLMError(NeusymError):
    """The LLM backend failed (endpoint unreachable, HTTP error, model load failure, context overflow)."""


class RunCancelled(NeusymError):
    """The work was cancelled by its caller (its client went away, or its time limit passed) while or
    before an LLM call ran; raised by :class:`CancellableLLM`."""


class ContextOverflowError(LLMError):
    """The prompt does not fit the model's context window (``n_prompt_tokens`` > ``n_ctx``)."""

    def __init__(self, message: str, n_prompt_tokens: int | None = None, n_ctx: int | None = None):
        super().__init__(message)
        self.n_prompt_tokens = n_prompt_tokens
        self.n_ctx = n_ctx


@dataclass
class LLMReply:
    """One completion: ``text`` (the assistant message), token usage as reported by the backend
    (``prompt_tokens`` includes ``cached_tokens``, the prefix reused from the previous request),
    ``finish_reason`` (``stop``, ``length``...) and wall-clock ``seconds``."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    finish_reason: str | None = None
    seconds: float = 0.0


@runtime_checkable
class LLM(Protocol):
    """What the agent needs from a chat model."""

    def chat(
        self, messages: list[dict], *, json_schema: dict | None = None, max_tokens: int | None = None
    ) -> LLMReply:
        """Complete the conversation; constrain the reply to ``json_schema`` when given."""
        ...


def _usage_numbers(usage: Any) -> tuple[int, int, int]:
    def get(obj: Any, key: str) -> Any:
        if obj is None:
            return None
        return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)

    prompt = int(get(usage, "prompt_tokens") or 0)
    completion = int(get(usage, "completion_tokens") or 0)
    cached = int(get(get(usage, "prompt_tokens_details"), "cached_tokens") or 0)
    return prompt, completion, cached


def response_format_for(json_schema: dict, name: str = "neusym_action") -> dict:
    """The OpenAI ``response_format`` payload for a JSON schema (strict mode)."""
    return {"type": "json_schema", "json_schema": {"name": name, "schema": json_schema, "strict": True}}


class OpenAICompatibleLLM:
    """Any OpenAI-compatible chat endpoint (OpenAI, vLLM, llama-server, Ollama's /v1, ...).

    ``base_url`` like ``http://host:8000/v1``; ``api_key`` may be None for local servers;
    ``temperature`` 0 for reproducible runs; ``timeout`` seconds per request. ``vision`` tells the
    agent it may attach page images (ViewImage) as ``image_url`` parts. Raises :class:`LLMError`
    on any API or transport failure.
    """

    supports_max_length = False  # OpenAI strict mode rejects maxLength; no thought length cap

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        temperature: float = 0.0,
        timeout: float = 300.0,
        *,
        vision: bool = False,
        default_max_tokens: int = 512,
    ):
        import openai

        self.base_url = base_url
        self.model = model
        self.temperature = temperature
        self.vision = vision
        self.default_max_tokens = default_max_tokens
        self._schema_unsupported = False
        self._api_key = api_key or "not-needed"
        self._timeout = timeout
        self._client = openai.OpenAI(base_url=base_url, api_key=self._api_key, timeout=timeout, max_retries=1)

    @property
    def supports_images(self) -> bool:
        """True when observation images may be sent as ``image_url`` content parts."""
        return self.vision

    @llm_request
    def chat(
        self, messages: list[dict], *, json_schema: dict | None = None, max_tokens: int | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> LLMReply:
        """One chat completion; see :class:`LLM`. Raises :class:`LLMError`.

        ``should_stop``: asked every :data:`ABORT_POLL_S` seconds while the request runs; when it
        returns True the HTTP request is aborted (its connection closed, so the endpoint sees the
        client go away and stops generating) before :class:`RunCancelled` is raised. A call is thus
        over, at this client and on the wire, when this method returns or raises: nothing keeps
        running in the background, so whoever bounds calls by bounding callers bounds the calls in
        flight at the endpoint."""
        request: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": max_tokens or self.default_max_tokens,
        }
        if json_schema is not None and not self._schema_unsupported:
            request["response_format"] = response_format_for(json_schema)
        started = time.monotonic()
        with _IN_FLIGHT:
            if should_stop is None:
                response = self._create(request, self._client.chat.completions.create)
            else:
                if should_stop():
                    raise RunCancelled("cancelled before the LLM call")
                response = self._create(request, lambda **r: self._abortable(r, should_stop))
        if not response.choices:
            raise LLMError(f"LLM endpoint {self.base_url} returned no choices")
        choice = response.choices[0]
        prompt, completion, cached = _usage_numbers(response.usage)
        return LLMReply(
            text=choice.message.content or "",
            prompt_tokens=prompt,
            completion_tokens=completion,
            cached_tokens=cached,
            finish_reason=choice.finish_reason,
            seconds=time.monotonic() - started,
        )

    def _create(self, request: dict, send: Callable[..., Any]) -> Any:
        """``send(**request)``, once more without ``response_format`` when the server refuses it; API
        errors become :class:`LLMError` / :class:`ContextOverflowError`."""
        import openai

        try:
            try:
                return send(**request)
            except openai.BadRequestError as exc:
                # servers without structured outputs reject response_format: retry once without it
                # (the agent's reply parser is lenient) and stop sending it to this endpoint
                if "response_format" not in request or "response_format" not in str(exc).lower():
                    raise
                self._schema_unsupported = True
                request.pop("response_format")
                return send(**request)
        except openai.APIError as exc:
            message = str(exc)
            if "context" in message.lower() and ("length" in message.lower() or "size" in message.lower()):
                raise ContextOverflowError(f"LLM endpoint {self.base_url}: {message}") from exc
            raise LLMError(f"LLM endpoint {self.base_url} failed: {message}") from exc

    def _abortable(self, request: dict, should_stop: Callable[[], bool]) -> Any:
        """One completion request through the SDK's async client in an event loop of this thread,
        cancelled (connection closed) as soon as ``should_stop()``; raises :class:`RunCancelled` then."""
        import asyncio

        import openai

        async def run() -> Any:
            client = openai.AsyncOpenAI(base_url=self.base_url, api_key=self._api_key, timeout=self._timeout,
                                        max_retries=1)
            try:
                call = asyncio.ensure_future(client.chat.completions.create(**request))
                while True:
                    done, _ = await asyncio.wait({call}, timeout=ABORT_POLL_S)
                    if done:
                        return call.result()
                    if should_stop():
                        call.cancel()
                        try:
                            await call
                        except BaseException:  # noqa: BLE001 - the cancelled request's own end
                            pass
                        raise RunCancelled("cancelled during the LLM call")
            finally:
                await client.close()

        return asyncio.run(run())


class _CallGauge:
    """How many endpoint LLM calls of this process are in flight (``now``) and the most seen (``peak``);
    a context manager around each call. Thread-safe."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0
        self._lock = threading.Lock()

    def __enter__(self) -> "_CallGauge":
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        return self

    def __exit__(self, *exc: Any) -> None:
        with self._lock:
            self.now -= 1


_IN_FLIGHT = _CallGauge()


def endpoint_calls_in_flight() -> tuple[int, int]:
    """``(now, peak)``: endpoint LLM calls of this process running now and the most at once since it
    started (what ``/healthz`` reports; a cancelled call counts until its request is really over)."""
    return _IN_FLIGHT.now, _IN_FLIGHT.peak


_SERVERS: dict[tuple, Any] = {}
_SERVERS_LOCK = threading.Lock()


def _load_server(model_path: Path, n_ctx: int, n_threads: int) -> Any:
    """The process-wide ``xllamacpp.Server`` for this model file and context size (loaded once)."""
    key = (str(model_path), n_ctx, n_threads)
    with _SERVERS_LOCK:
        server = _SERVERS.get(key)
        if server is None:
            import xllamacpp as xlc

            params = xlc.CommonParams()
            params.model.path = str(model_path)
            params.n_ctx = n_ctx
            params.n_parallel = 1  # one slot: consecutive agent turns reuse its KV cache (prompt prefix)
            params.cache_prompt = True
            params.cpuparams.n_threads = n_threads
            params.cpuparams_batch.n_threads = n_threads
            params.warmup = False
            params.verbosity = 0
            try:
                server = xlc.Server(params)
            except Exception as exc:  # noqa: BLE001 - native loader errors have no common type
                raise LLMError(f"cannot load the offline model {model_path}: {exc}") from exc
            _SERVERS[key] = server
        return server


class LocalLlamaLLM:
    """The offline GGUF (Qwen2.5-Coder-1.5B-Instruct Q4_K_M) run in-process by llama.cpp (xllamacpp).

    The model file is assembled and verified by :func:`neusym.llm.model_files.offline_model_path`
    on first use; the server is created once per process and (model, n_ctx, threads), with
    ``n_ctx = settings.llm_context_tokens`` and ``settings.llm_threads`` CPU threads. A single slot
    with prompt caching means a request that extends the previous one only evaluates the new
    tokens. Raises :class:`LLMError` (or :class:`ContextOverflowError`) on failure.
    """

    supports_images = False
    supports_max_length = True  # llama.cpp grammars honour maxLength (bounds the thought)

    def __init__(self, settings: Settings, model_path: Path | None = None):
        self.settings = settings
        self._model_path = model_path
        self._server: Any = None
        self.load_seconds: float | None = None

    @property
    def model_path(self) -> Path:
        """The verified GGUF file (assembled from the part packages when needed)."""
        if self._model_path is None:
            from neusym.llm.model_files import offline_model_path

            self._model_path = offline_model_path(self.settings)
        return self._model_path

    def load(self) -> Any:
        """Load (or fetch the cached) llama.cpp server; records ``load_seconds`` for this instance."""
        if self._server is None:
            started = time.monotonic()
            self._server = _load_server(self.model_path, self.settings.llm_context_tokens, self.settings.llm_threads)
            self.load_seconds = time.monotonic() - started
        return self._server

    @llm_request
    def chat(
        self, messages: list[dict], *, json_schema: dict | None = None, max_tokens: int | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> LLMReply:
        """One chat completion; see :class:`LLM`. ``should_stop``: asked after every generated token
        (the reply is then streamed); when it returns True generation stops and
        :class:`RunCancelled` is raised."""
        server = self.load()
        request: dict[str, Any] = {
            "messages": messages,
            "temperature": self.settings.llm_temperature,
            "max_tokens": max_tokens or self.settings.llm_max_tokens,
            "cache_prompt": True,
        }
        if json_schema is not None:
            request["response_format"] = response_format_for(json_schema)
        started = time.monotonic()
        if should_stop is not None:
            response = self._streamed(server, request, should_stop)
        else:
            try:
                response = server.handle_chat_completions(request)
            except Exception as exc:  # noqa: BLE001
                raise LLMError(f"offline model failed: {exc}") from exc
        if not isinstance(response, dict):
            raise LLMError(f"offline model returned an unexpected response: {response!r:.200}")
        if "error" in response:
            error = response["error"] if isinstance(response["error"], dict) else {"message": str(response["error"])}
            message = str(error.get("message", error))
            if error.get("type") == "exceed_context_size_error":
                raise ContextOverflowError(
                    f"offline model: {message}", error.get("n_prompt_tokens"), error.get("n_ctx")
                )
            raise LLMError(f"offline model failed: {message}")
        try:
            choice = response["choices"][0]
            text = choice["message"].get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise LLMError(f"offline model returned an unexpected response: {str(response)[:200]}") from exc
        prompt, completion, cached = _usage_numbers(response.get("usage"))
        return LLMReply(
            text=text,
            prompt_tokens=prompt,
            completion_tokens=completion,
            cached_tokens=cached,
            finish_reason=choice.get("finish_reason"),
            seconds=time.monotonic() - started,
        )


    @staticmethod
    def _streamed(server: Any, request: dict, should_stop: Callable[[], bool]) -> dict:
        """Run ``request`` streamed, asking ``should_stop`` after each chunk; the chunks joined into
        the shape of a non-streamed response (``choices[0].message.content``, ``usage``)."""
        parts: list[str] = []
        state: dict[str, Any] = {"finish": None, "usage": None, "error": None, "stopped": False}

        def on_chunk(chunk: Any) -> bool:
            if isinstance(chunk, dict):
                if "error" in chunk:
                    state["error"] = chunk["error"]
                    return True
                for choice in chunk.get("choices") or []:
                    content = (choice.get("delta") or {}).get("content")
                    if content:
                        parts.append(content)
                    if choice.get("finish_reason"):
                        state["finish"] = choice["finish_reason"]
                if chunk.get("usage"):
                    state["usage"] = chunk["usage"]
            if should_stop():
                state["stopped"] = True
                return True
            return False

        if should_stop():
            raise RunCancelled("cancelled before the LLM call")
        streamed = dict(request, stream=True, stream_options={"include_usage": True})
        try:
            returned = server.handle_chat_completions(streamed, on_chunk)
        except Exception as exc:  # noqa: BLE001
            raise LLMError(f"offline model failed: {exc}") from exc
        if state["stopped"]:
            raise RunCancelled("cancelled during the LLM call")
        if isinstance(returned, dict) and "error" in returned:
            return returned
        if state["error"] is not None:
            return {"error": state["error"]}
        return {"choices": [{"message": {"role": "assistant", "content": "".join(parts)},
                             "finish_reason": state["finish"]}], "usage": state["usage"] or {}}


class CancellableLLM:
    """An :class:`LLM` whose calls stop when ``cancel`` is set (the client went away, the run's time
    limit passed): a call then raises :class:`RunCancelled` — before it starts, or while it runs.

    The offline model stops generating at the next token (its reply is streamed); an endpoint's
    HTTP request is aborted (its connection closed; :meth:`OpenAICompatibleLLM.chat` with
    ``should_stop``). A wrapped model whose ``chat`` takes no ``should_stop`` is waited for and the
    cancel checked when it returns. Either way, when :meth:`chat` returns or raises, the call is
    over: a caller that holds a slot while it calls (``neusym serve``'s LLM slots) bounds the calls
    in flight, not only the runs. Other attributes (``supports_images``, ...) are the wrapped model's.
    """

    def __init__(self, llm: LLM, cancel: threading.Event):
        self.llm = llm
        self.cancel = cancel

    def __getattr__(self, name: str) -> Any:
        return getattr(self.llm, name)

    def chat(
        self, messages: list[dict], *, json_schema: dict | None = None, max_tokens: int | None = None
    ) -> LLMReply:
        """One chat completion of the wrapped model; see :class:`LLM`. Raises :class:`RunCancelled`."""
        if self.cancel.is_set():
            raise RunCancelled("cancelled before the LLM call")
        if isinstance(self.llm, (LocalLlamaLLM, OpenAICompatibleLLM)):
            return self.llm.chat(messages, json_schema=json_schema, max_tokens=max_tokens,
                                 should_stop=self.cancel.is_set)
        reply = self.llm.chat(messages, json_schema=json_schema, max_tokens=max_tokens)
        if self.cancel.is_set():
            raise RunCancelled("cancelled during the LLM call")
        return reply


def make_llm(settings: Settings) -> LLM:
    """The configured LLM: :class:`OpenAICompatibleLLM` when ``settings.llm_base_url`` is set (model
    ``settings.llm_model``, key ``settings.llm_api_key``, ``settings.llm_vision`` if defined), else
    :class:`LocalLlamaLLM` (loaded lazily on the first ``chat``)."""
    if settings.llm_base_url:
        return OpenAICompatibleLLM(
            settings.llm_base_url,
            settings.llm_model,
            settings.llm_api_key,
            settings.llm_temperature,
            settings.llm_timeout_s,
            vision=bool(getattr(settings, "llm_vision", False)),
            default_max_tokens=settings.llm_max_tokens,
        )
    return LocalLlamaLLM(settings)


__all__ = [
    "CHARS_PER_TOKEN",
    "CancellableLLM",
    "ContextOverflowError",
    "LLM",
    "LLMError",
    "LLMReply",
    "LocalLlamaLLM",
    "OpenAICompatibleLLM",
    "RunCancelled",
    "endpoint_calls_in_flight",
    "make_llm",
    "response_format_for",
]
