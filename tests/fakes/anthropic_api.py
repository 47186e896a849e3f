"""A strict fake of the Anthropic Messages API, served over real HTTP from its own thread.

Point the real SDK at it::

    with FakeAnthropic() as fake:
        fake.script(reply_tools(ToolUse("search", {"q": "x"})), reply_text("done"))
        client = anthropic.AsyncAnthropic(base_url=fake.base_url, api_key="test-key")
        ...
        fake.wait_for_requests(2)

Contract:

- ``POST /v1/messages`` (streaming and not), ``POST /v1/messages/count_tokens``, and
  ``GET /v1/models`` / ``GET /v1/models/{id}`` (from ``models``); any other path gets a
  real-shaped 404. Requests need a credential — ``x-api-key`` or
  ``Authorization: Bearer`` (SDK 2.10 sends the latter) — else 401, an ``anthropic-version``
  header, else 400, and must pass ``validate_request``, else 400.
- Answers come from, in order: the first queued ``script_when`` entry whose predicate matches,
  then the ``script`` queue, then the ``responder`` (default: ``echo_responder``). A request
  rejected before that point consumes nothing.
- Every request is recorded on arrival (``requests``) and updated as its answer proceeds.
- ``context_window_tokens``: when set, a ``/v1/messages`` request whose prompt counts more
  tokens (``anthropic_usage.count_tokens``: ASCII at 4 characters a token, others 1) gets the
  real 400 ``invalid_request_error`` "prompt is too long: N tokens > M maximum".
- ``models`` (default ``anthropic_models.DEFAULT_MODELS``, a per-fake copy): per model id its
  window, output limit and whether it accepts prefill, ``temperature`` and ``thinking``; a
  request breaking one gets the service's 400 (``anthropic_models.check_for_model``; a
  trailing assistant message on a model without prefill gets the exact refusal). Ids not in
  the table are served without limits, or with ``strict_models`` get the real 404.
- Thinking blocks (``Thinking`` parts) are served with signatures; one sent back altered, or
  dropped from the assistant turn of a tool loop in progress while ``thinking`` is on, gets
  the service's 400 (``anthropic_thinking``).
- ``tool_ids="numbered"``: tool uses without a scripted id are served as ``toolu_1``,
  ``toolu_2``, … per response (some Anthropic-compatible endpoints do this), so ids repeat
  across responses; the default ``"random"`` mimics the real service.
- The server runs on its own event loop in a daemon thread, so sync tests, async tests and
  subprocesses can all use it; every public method is thread-safe.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from types import TracebackType
from typing import Any, Literal

from aiohttp import web

from tests.fakes.anthropic_models import DEFAULT_MODELS, FakeModel, check_for_model, unknown_model
from tests.fakes.anthropic_thinking import ThinkingLedger
from tests.fakes.anthropic_recording import RecordedRequest, RecordKey, RequestLog, RequestsPredicate
from tests.fakes.anthropic_script import (
    Disconnect,
    Error,
    Predicate,
    Reply,
    Responder,
    Response,
    ScriptQueue,
    Stall,
    StreamError,
    Truncate,
    echo_responder,
    new_id,
)
from tests.fakes.anthropic_usage import PromptCache, PromptUsage, count_tokens
from tests.fakes.anthropic_validation import ApiError, invalid, validate_request
from tests.fakes.anthropic_wire import SseEvent, error_body, message_json, stream_steps

log = logging.getLogger(__name__)

_PATHS = ("/v1/messages", "/v1/messages/count_tokens")
_STREAM_ERROR_STATUS = {"overloaded_error": 529, "rate_limit_error": 429, "api_error": 500}


class _Dropped(Exception):
    """The handler dropped the connection; nothing more may be written."""


class FakeAnthropic:
    """The fake server. Use as a context manager, or ``start()`` / ``close()``. Not
    restartable: after ``close()``, ``base_url`` raises RuntimeError."""

    def __init__(
        self,
        *,
        responder: Responder | None = None,
        api_key: str | None = None,
        require_user_first: bool = True,
        host: str = "127.0.0.1",
        context_window_tokens: int | None = None,
        tool_ids: Literal["random", "numbered"] = "random",
        models: dict[str, FakeModel] | None = None,
        strict_models: bool = False,
    ) -> None:
        """``api_key``: when set, any other credential gets 401. ``require_user_first``: reject
        a conversation opening with an assistant turn (Bedrock does; the 1P API now allows it).
        ``context_window_tokens`` and ``tool_ids``: see the module docstring; both may also be
        changed at any time through the attributes of the same name."""
        self._api_key = api_key
        self.context_window_tokens = context_window_tokens
        self.tool_ids = tool_ids
        self.models: dict[str, FakeModel] = dict(DEFAULT_MODELS if models is None else models)
        self.strict_models = strict_models
        self._require_user_first = require_user_first
        self._host = host
        self._scripts = ScriptQueue(responder or echo_responder)
        self._log = RequestLog()
        self._cache = PromptCache()
        self._thinking = ThinkingLedger()
        self._lock = threading.Lock()  # guards the lifecycle state only
        self._state: Literal["new", "running", "closed"] = "new"
        self._port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._closing: asyncio.Event | None = None

    # ---- lifecycle -------------------------------------------------------------------

    def start(self) -> FakeAnthropic:
        """Bind a free port and serve; returns once the server accepts connections."""
        with self._lock:
            if self._state != "new":
                raise RuntimeError(f"FakeAnthropic cannot start: it is {self._state}")
            self._state = "running"
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((self._host, 0))
        self._port = sock.getsockname()[1]
        loop = asyncio.new_event_loop()
        self._loop = loop
        ready: asyncio.Future[None] = loop.create_future()
        self._thread = threading.Thread(
            target=self._run, args=(loop, sock, ready), name="fake-anthropic", daemon=True
        )
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(_wait(ready), loop).result(timeout=10)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Stop serving: stalls end, open connections drop, async waiters are cancelled.
        Idempotent."""
        with self._lock:
            was_running = self._state == "running"
            self._state = "closed"
        loop, thread = self._loop, self._thread
        if was_running and loop is not None and thread is not None and thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=10)
            finally:
                loop.call_soon_threadsafe(loop.stop)
                thread.join(timeout=10)
        self._log.cancel_waiters()

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>`` — pass as the SDK's ``base_url`` (no ``/v1``)."""
        if self._state != "running":
            raise RuntimeError(f"FakeAnthropic is {self._state}; start() it first")
        return f"http://{self._host}:{self._port}"

    # ---- scripting -------------------------------------------------------------------

    def script(self, *responses: Response) -> None:
        """Queue answers, consumed one per accepted request, in order."""
        self._scripts.add(responses)

    def script_when(self, predicate: Predicate, *responses: Response) -> None:
        """Queue answers reserved for requests where ``predicate(request_json)`` holds; they
        take precedence over ``script``. Predicates run on the server thread under a lock:
        keep them pure (read the request, touch nothing else)."""
        self._scripts.add(responses, predicate)

    @property
    def responder(self) -> Responder:
        """Answers requests when no script applies; may be replaced at any time."""
        return self._scripts.responder

    @responder.setter
    def responder(self, responder: Responder) -> None:
        self._scripts.responder = responder

    @property
    def pending_scripts(self) -> int:
        """Scripted answers not yet consumed (both queues)."""
        return self._scripts.pending()

    # ---- recording -------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received so far, in arrival order."""
        return self._log.snapshot()

    def wait_for_requests(self, n: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """Block until at least ``n`` requests have arrived; TimeoutError otherwise."""
        return self.wait_until(lambda requests: len(requests) >= n, timeout, f"{n} requests")

    async def await_requests(self, n: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """``wait_for_requests`` without blocking the caller's event loop."""
        return await self.await_until(lambda requests: len(requests) >= n, timeout, f"{n} requests")

    def wait_until(
        self, condition: RequestsPredicate, timeout: float = 5.0, what: str = "condition"
    ) -> list[RecordedRequest]:
        """Block until ``condition(requests)`` holds, re-checked on every arrival and update
        (indexing past the end counts as "not yet"); returns that snapshot, or raises
        TimeoutError naming ``what`` and listing what was seen."""
        return self._log.wait_until(condition, timeout, what)

    async def await_until(
        self, condition: RequestsPredicate, timeout: float = 5.0, what: str = "condition"
    ) -> list[RecordedRequest]:
        """``wait_until`` without blocking the caller's event loop."""
        return await self._log.await_until(condition, timeout, what)

    def reset(self) -> None:
        """Forget requests, scripts and the prompt cache; keeps the responder and the server.
        Requests in flight at the time are no longer tracked."""
        self._log.clear()
        self._scripts.clear()
        self._cache.clear()
        self._thinking.clear()

    # ---- server thread ---------------------------------------------------------------

    def _run(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, ready: asyncio.Future[None]) -> None:
        asyncio.set_event_loop(loop)
        serving = loop.create_task(self._serve(sock, ready))  # owned here until the loop ends
        try:
            loop.run_forever()
        finally:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _serve(self, sock: socket.socket, ready: asyncio.Future[None]) -> None:
        try:
            self._closing = asyncio.Event()
            app = web.Application(client_max_size=64 * 1024 * 1024)
            # One catch-all route: wrong paths (a base_url ending in /v1) get the real error
            # shape and are recorded too.
            app.router.add_route("*", "/{tail:.*}", self._handle)
            # handler_cancellation: a client that hangs up cancels its handler (and stall).
            runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0)
            await runner.setup()
            self._runner = runner
            await web.SockSite(runner, sock).start()
        except BaseException as exc:
            ready.set_exception(exc)
            raise
        ready.set_result(None)

    async def _shutdown(self) -> None:
        if self._closing is not None:
            self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _pause(self, stall: Stall) -> None:
        """The fake's own pacing (``None`` = until close); ends early when the fake closes or
        the stall's ``until`` is set."""
        assert self._closing is not None
        closing = self._closing
        try:
            async with asyncio.timeout(stall.seconds):
                if stall.until is None:
                    await closing.wait()
                    return
                while not (stall.until.is_set() or closing.is_set()):
                    await asyncio.sleep(0.01)  # timing-ok: re-check an event set from the test's thread
        except TimeoutError:
            pass

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = None
        headers = {k.lower(): v for k, v in request.headers.items()}
        key = self._log.append(
            RecordedRequest(path=request.path, headers=headers, body=raw, json=body, received_at=time.monotonic())
        )
        request_id = new_id("req_011C")
        try:
            return await self._dispatch(request, key, request_id, body)
        except ApiError as exc:
            return self._error(key, request_id, exc.status, exc.error_type, exc.message, should_retry=False)
        except _Dropped:
            self._log.update(key, outcome="dropped")
            return web.Response()  # never sent: the transport is already closed
        except (ConnectionResetError, asyncio.CancelledError):
            # The client hung up: handler_cancellation cancels us, or a write fails first.
            self._log.update(key, outcome="client_disconnected")
            raise

    async def _dispatch(self, request: web.Request, key: RecordKey, request_id: str, body: Any) -> web.StreamResponse:
        if request.method == "GET" and (request.path == "/v1/models" or request.path.startswith("/v1/models/")):
            self._check_headers(request)
            return self._models_answer(key, request_id, request.path.removeprefix("/v1/models").strip("/"))
        if request.method != "POST" or request.path not in _PATHS:
            raise ApiError(404, "not_found_error", f"Not Found: {request.method} {request.path}")
        self._check_headers(request)
        if body is None:
            raise invalid("There was an error parsing the body of your request: body is not valid JSON")
        endpoint = "count_tokens" if request.path.endswith("/count_tokens") else "messages"
        validate_request(body, endpoint=endpoint, require_user_first=self._require_user_first)
        model = self.models.get(body["model"])
        if model is None and self.strict_models:
            raise unknown_model(body["model"])
        limit = self.context_window_tokens
        if endpoint == "messages" and limit is not None and (used := count_tokens(body)) > limit:
            raise invalid(f"prompt is too long: {used} tokens > {limit} maximum")
        if endpoint == "messages" and model is not None:
            check_for_model(body, model, prompt_tokens=count_tokens(body))
        self._thinking.check(body)
        if endpoint == "count_tokens":
            self._log.update(key, status=200, outcome="answered")
            return web.json_response({"input_tokens": count_tokens(body)}, headers={"request-id": request_id})
        try:
            response = self._scripts.next(body)
        except Exception as exc:  # a broken responder or predicate: make it loud, not a hang
            log.exception("fake_anthropic.responder_failed")
            raise ApiError(500, "api_error", f"fake responder raised {exc!r}") from exc
        if isinstance(response, Error):
            return self._error(
                key, request_id, response.status, response.resolved_type, response.resolved_message,
                retry_after=response.retry_after, should_retry=response.should_retry, served=response,
            )  # fmt: skip
        if isinstance(response, Disconnect):
            raise self._drop(request, key, response)
        if isinstance(response, Stall):
            self._log.update(key, served=response)
            await self._pause(response)
            raise self._drop(request, key, response)
        reply = response.with_ids(numbered=self.tool_ids == "numbered")
        self._thinking.served(reply)
        self._log.update(key, served=reply)
        prompt = self._cache.account(body)
        message_id = new_id("msg_01")
        if body.get("stream"):
            return await self._stream(request, key, request_id, reply, message_id, body["model"], prompt)
        for part in reply.parts:
            if isinstance(part, Stall):
                await self._pause(part)
            elif isinstance(part, Disconnect):
                raise self._drop(request, key, reply)
            elif isinstance(part, StreamError):
                status = _STREAM_ERROR_STATUS.get(part.error_type, 500)
                return self._error(key, request_id, status, part.error_type, part.message, served=reply)
        self._log.update(key, status=200, outcome="answered")
        answer = message_json(reply, message_id=message_id, model=body["model"], prompt=prompt)
        return web.json_response(answer, headers={"request-id": request_id})

    async def _stream(
        self, request: web.Request, key: RecordKey, request_id: str, reply: Reply, message_id: str,
        model: str, prompt: PromptUsage,
    ) -> web.StreamResponse:  # fmt: skip
        stream = web.StreamResponse(
            status=200,
            headers={
                "content-type": "text/event-stream; charset=utf-8",
                "cache-control": "no-cache",
                "request-id": request_id,
            },
        )
        self._log.update(key, status=200)
        await stream.prepare(request)
        for step in stream_steps(reply, message_id=message_id, model=model, prompt=prompt):
            if isinstance(step, SseEvent):
                await stream.write(step.encode())
                if step.name == "error":
                    self._log.update(key, error=step.data["error"]["message"])
            elif isinstance(step, Stall):
                await self._pause(step)
            elif isinstance(step, Truncate):
                await stream.write_eof()
                self._log.update(key, outcome="truncated")
                return stream
            else:
                raise self._drop(request, key, reply)
        await stream.write_eof()
        self._log.update(key, outcome="answered")
        return stream

    def _models_answer(self, key: RecordKey, request_id: str, model_id: str) -> web.Response:
        """``GET /v1/models`` (one page, newest first) or ``GET /v1/models/{id}``."""
        if model_id:
            model = self.models.get(model_id)
            if model is None:
                raise unknown_model(model_id)
            answer: dict[str, Any] = model.info()
        else:
            data = sorted((m.info() for m in self.models.values()), key=lambda m: m["created_at"], reverse=True)
            answer = {
                "data": data, "has_more": False,
                "first_id": data[0]["id"] if data else None, "last_id": data[-1]["id"] if data else None,
            }  # fmt: skip
        self._log.update(key, status=200, outcome="answered")
        return web.json_response(answer, headers={"request-id": request_id})

    def _check_headers(self, request: web.Request) -> None:
        # SDK 2.10 sends api_key= as "Authorization: Bearer <key>", not as x-api-key.
        authorization = request.headers.get("authorization", "")
        bearer = authorization[len("bearer ") :] if authorization.lower().startswith("bearer ") else ""
        credential = request.headers.get("x-api-key", "").strip() or bearer.strip()
        if not credential:
            raise ApiError(401, "authentication_error", "x-api-key header is required")
        if self._api_key is not None and credential != self._api_key:
            raise ApiError(401, "authentication_error", "invalid x-api-key")
        if not request.headers.get("anthropic-version"):
            raise invalid("anthropic-version: header is required")

    def _error(
        self, key: RecordKey, request_id: str, status: int, error_type: str, message: str, *,
        retry_after: float | None = None, should_retry: bool | None = None, served: Response | None = None,
    ) -> web.Response:  # fmt: skip
        headers = {"request-id": request_id}
        if retry_after is not None:
            headers["retry-after"] = f"{retry_after:g}"
        if should_retry is not None:
            headers["x-should-retry"] = "true" if should_retry else "false"
        self._log.update(key, status=status, error=message, served=served, outcome="answered")
        return web.json_response(error_body(error_type, message, request_id), status=status, headers=headers)

    def _drop(self, request: web.Request, key: RecordKey, served: Response) -> _Dropped:
        self._log.update(key, served=served)
        if request.transport is not None:
            request.transport.abort()
        return _Dropped()


async def _wait(future: asyncio.Future[None]) -> None:
    await future
