"""The OpenAI-compatible app over the in-process speculative engine.

Routes: ``GET /v1/models``, ``GET /v1/models/{id}``, ``POST /v1/completions``,
``POST /v1/chat/completions``, ``GET /metrics``, ``GET /health``.

Each request is validated on the event loop (no model needed), then becomes a
``Job`` on the engine's worker thread (see ``worker.py``), which tokenizes,
generates and posts events back to the loop: ``("started", None)`` once the
prompt is accepted, ``("step", Step)`` per verification pass, then
``("done", GenerationResult)`` or ``("error", ApiError)``. A request whose
prompt the model refuses (bad token ids, no FIM tokens, a chat template that
fails) gets a 4xx before any stream starts, because the handler waits for
``started`` before it answers.

Disconnects: once the body is read, a watcher task waits for the client's
``http.disconnect``; the moment it comes, the job's cancel flag is set (the
engine stops at its next verification pass) and a waiting handler gets a
``("gone", None)`` event. Once streaming, Starlette cancels the response when
the client goes away, with the same effect. So a client that leaves stops its
generation whether it asked for a stream or not.

Shutdown (SIGINT/SIGTERM): ``begin_shutdown`` cancels every job at once; a
request whose generation was stopped gets a 503 JSON error, a stream gets a
final error event and ``data: [DONE]``, never a plain-text 500 or a stream that
just stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from structspec.completion.prompt import fim_text_tokens
from structspec.engine.decode import Engine, EngineError, GenerationOptions, GenerationResult
from structspec.http.chat import TemplateError, chat_prompt, model_chat_template
from structspec.http.common import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_MAX_BODY_BYTES,
    ClientGone,
    error_response,
    http_exception,
    metrics_endpoint,
    parse_json,
    read_body,
)
from structspec.http.openai_api import (
    ApiError,
    CompletionRequest,
    ResponseShape,
    finish_reason,
    parse_request,
)
from structspec.http.worker import EngineWorker, Job, QueueFull
from structspec.metrics import Metrics
from structspec.model.base import Model

#: Model names every in-process server also answers to ("auto" is what the
#: original structspec's examples send).
MODEL_ALIASES = ("auto", "default")

Event = tuple[str, Any]


def _tokenize(model: Model, text: str, *, add_bos: bool, special: bool) -> list[int]:
    """Tokenize, parsing special tokens (chat templates) when the model supports it."""
    if special:
        try:
            return model.tokenize(text, add_bos=add_bos, special=True)  # type: ignore[call-arg]
        except TypeError:
            pass  # a model whose tokenize has no ``special`` flag
    return model.tokenize(text, add_bos=add_bos)


class EngineApp:
    """State of one in-process server: engine worker, metrics, chat template."""

    def __init__(
        self,
        engine: Engine | Callable[[], Engine],
        *,
        model_id: str,
        max_queue: int = 32,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        body_timeout: float = DEFAULT_BODY_TIMEOUT_S,
        default_max_tokens: int = 128,
        speculative: bool = True,
        token_healing: bool = True,
        metrics: Metrics | None = None,
    ) -> None:
        self.model_id = model_id
        self.max_body_bytes = max_body_bytes
        self.body_timeout = body_timeout
        self.closing = False
        self.default_max_tokens = default_max_tokens
        self.speculative = speculative
        self.token_healing = token_healing
        self.metrics = metrics or Metrics(mode="engine", model=model_id)
        # a loader runs on the worker thread, where every later llama.cpp call runs
        self.worker = EngineWorker(engine, self.metrics, max_queue=max_queue)
        self.engine = self.worker.engine
        self.template = model_chat_template(self.engine.model)
        self.started = int(time.time())

    # -- routes --------------------------------------------------------------
    def _model_card(self) -> dict[str, Any]:
        model = self.engine.model
        return {
            "id": self.model_id,
            "object": "model",
            "created": self.started,
            "owned_by": "structspec",
            "context_length": model.n_ctx,
            "chat_template": "gguf" if self.template else "plain",
            "fim": model.fim_tokens() is not None,
        }

    async def models(self, request: Request) -> Response:
        self.metrics.requests.labels(endpoint="models", status="200").inc()
        return JSONResponse({"object": "list", "data": [self._model_card()]})

    async def model(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name != self.model_id and name not in MODEL_ALIASES:
            return self._fail("models", self._unknown_model(name))
        self.metrics.requests.labels(endpoint="models", status="200").inc()
        return JSONResponse(self._model_card())

    async def health(self, request: Request) -> Response:
        return JSONResponse(
            {"status": "ok", "mode": "engine", "model": self.model_id, "queue": self.worker.waiting}
        )

    def _unknown_model(self, name: str) -> ApiError:
        return ApiError(
            404,
            f"the model {name!r} does not exist; this server serves {self.model_id!r}",
            param="model",
            code="model_not_found",
        )

    def _fail(self, endpoint: str, err: ApiError) -> Response:
        self.metrics.requests.labels(endpoint=endpoint, status=str(err.status)).inc()
        if err.code == "queue_full":
            self.metrics.rejected.labels(reason="queue_full").inc()
        elif err.status == 413:
            self.metrics.rejected.labels(reason="too_large").inc()
        elif 400 <= err.status < 500:
            self.metrics.rejected.labels(reason="bad_request").inc()
        return error_response(err)

    async def completions(self, request: Request) -> Response:
        return await self._complete(request, chat=False)

    async def chat_completions(self, request: Request) -> Response:
        return await self._complete(request, chat=True)

    async def _complete(self, request: Request, *, chat: bool) -> Response:
        endpoint = "chat" if chat else "completions"
        t0 = time.monotonic()
        try:
            body = parse_json(await read_body(request, self.max_body_bytes, self.body_timeout))
            req = parse_request(body, chat=chat)
            if (
                req.model is not None
                and req.model != self.model_id
                and req.model not in MODEL_ALIASES
            ):
                raise self._unknown_model(req.model)
            job, events = self._submit(req, request)
        except ApiError as err:
            return self._fail(endpoint, err)
        except ClientGone:
            self.metrics.requests.labels(endpoint=endpoint, status="499").inc()
            return Response(status_code=499)
        shape = ResponseShape(chat, self.model_id)
        watcher = asyncio.create_task(self._watch_disconnect(request, job, events))
        try:
            kind, payload = await self._wait(events)
            if kind == "error":
                return self._fail(endpoint, payload)
            if req.stream:
                # From here Starlette watches the connection for the stream.
                watcher.cancel()
                return StreamingResponse(
                    self._sse(req, shape, job, events, endpoint, t0),
                    media_type="text/event-stream",
                    headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
                )
            while kind != "done":
                kind, payload = await self._wait(events)
                if kind == "error":
                    return self._fail(endpoint, payload)
            if self._stopped_by_shutdown(payload):
                return self._fail(endpoint, self._shutdown_error(payload))
        except ClientGone:
            self.metrics.requests.labels(endpoint=endpoint, status="499").inc()
            return Response(status_code=499)
        except BaseException:
            self.worker.cancel(job)  # the handler itself was cancelled (shutdown): free the model
            raise
        finally:
            watcher.cancel()
        result: GenerationResult = payload
        self.metrics.requests.labels(endpoint=endpoint, status="200").inc()
        self.metrics.latency.labels(endpoint=endpoint).observe(time.monotonic() - t0)
        tokens = result.tokens if req.return_tokens else None
        return JSONResponse(shape.full(result.text, result.stats, result.warnings, tokens))

    # -- the job -------------------------------------------------------------
    def _submit(self, req: CompletionRequest, request: Request) -> tuple[Job, asyncio.Queue[Event]]:
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[Event] = asyncio.Queue()

        def post(event: Event) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is listening
                loop.call_soon_threadsafe(events.put_nowait, event)

        key = (
            req.user
            or request.headers.get("authorization")
            or (request.client.host if request.client else "?")
        )
        job = Job(
            key,
            self._work(req, post),
            on_skip=lambda: post(("error", self._shutdown_error(None))),
        )
        if self.closing:
            raise self._shutdown_error(None)
        try:
            self.worker.submit(job)
        except QueueFull as full:
            raise ApiError(
                503,
                f"the server is busy: {self.worker.max_queue} requests are already waiting "
                f"for the model; retry in {full.retry_after} s",
                kind="server_error",
                code="queue_full",
                headers={"Retry-After": str(full.retry_after)},
            ) from None
        return job, events

    def _prompt_tokens(self, req: CompletionRequest) -> tuple[list[int], tuple[str, ...]]:
        """Tokens of the request's prompt and extra stop strings (runs on the worker)."""
        model = self.engine.model
        if req.chat:
            try:
                prompt = chat_prompt(self.template, req.messages, model)
            except TemplateError as exc:
                raise ApiError(400, str(exc), param="messages") from None
            special = self.template is not None
            return _tokenize(model, prompt.text, add_bos=True, special=special), prompt.stop
        if req.prompt_tokens is not None:
            bad = [t for t in req.prompt_tokens if not 0 <= t < model.n_vocab]
            if bad:
                raise ApiError(
                    400,
                    f"token id {bad[0]} is outside the vocabulary (0..{model.n_vocab - 1})",
                    param="prompt",
                )
            return list(req.prompt_tokens), ()
        assert req.prompt is not None
        if req.suffix is None:
            return model.tokenize(req.prompt), ()
        fim = model.fim_tokens()
        if fim is None:
            raise ApiError(
                400,
                f"the model {self.model_id!r} has no fill-in-the-middle tokens; leave out 'suffix'",
                param="suffix",
            )
        return fim_text_tokens(model, fim, req.prompt, req.suffix), ()

    def _work(
        self, req: CompletionRequest, post: Callable[[Event], None]
    ) -> Callable[[Engine, Job], None]:
        def work(engine: Engine, job: Job) -> None:
            try:
                tokens, extra_stop = self._prompt_tokens(req)
                options = GenerationOptions(
                    max_tokens=req.max_tokens or self.default_max_tokens,
                    stop=tuple(dict.fromkeys(req.stop + extra_stop)),
                    speculative=self.speculative,
                    token_healing=self.token_healing and req.heals,
                    sampling=req.sampling,
                )
                if not req.cache_prompt:  # evaluated from scratch, as the client asked
                    engine.model.truncate(0)
                gen = engine.stream(tokens, options, cancelled=lambda: job.cancelled)
            except ApiError as err:
                post(("error", err))
                return
            except EngineError as exc:
                post(("error", ApiError(400, str(exc))))
                return
            except Exception as exc:  # noqa: BLE001 - a request must never take the server down
                post(
                    (
                        "error",
                        ApiError(
                            500, f"internal error: {type(exc).__name__}: {exc}", kind="server_error"
                        ),
                    )
                )
                return
            post(("started", None))
            try:
                for step in gen:
                    post(("step", step))
            except Exception as exc:  # noqa: BLE001
                post(
                    (
                        "error",
                        ApiError(
                            500,
                            f"generation failed: {type(exc).__name__}: {exc}",
                            kind="server_error",
                        ),
                    )
                )
                return
            assert gen.result is not None
            self.metrics.observe_generation(gen.result.stats)
            post(("done", gen.result))

        return work

    async def _watch_disconnect(
        self, request: Request, job: Job, events: asyncio.Queue[Event]
    ) -> None:
        """Cancel ``job`` and wake its handler as soon as the client disconnects.

        Runs once the body is read, so the next ASGI message can only be
        ``http.disconnect`` (uvicorn also sends it once the response is complete,
        which is harmless: the job is finished by then).
        """
        while (await request.receive())["type"] != "http.disconnect":
            pass
        self.worker.cancel(job)
        events.put_nowait(("gone", None))

    @staticmethod
    async def _wait(events: asyncio.Queue[Event]) -> Event:
        """The next event of a job; raises ``ClientGone`` if the client left."""
        event = await events.get()
        if event[0] == "gone":
            raise ClientGone()
        return event

    def _stopped_by_shutdown(self, result: GenerationResult) -> bool:
        return self.closing and result.stats.stop_reason == "cancelled"

    def _shutdown_error(self, result: GenerationResult | None) -> ApiError:
        done = f" after {result.stats.tokens} tokens" if result is not None else ""
        return ApiError(
            503,
            f"the server is shutting down; the generation was stopped{done}",
            kind="server_error",
            code="shutting_down",
        )

    def begin_shutdown(self) -> None:
        """Stop every job now (the server is exiting); see the module docstring."""
        self.closing = True
        self.worker.cancel_all()

    async def _sse(
        self,
        req: CompletionRequest,
        shape: ResponseShape,
        job: Job,
        events: asyncio.Queue[Event],
        endpoint: str,
        t0: float,
    ) -> AsyncIterator[bytes]:
        status = "200"
        seen_text = False
        try:
            if req.chat:
                yield _sse_data(shape.chunk(None, first=True))
            while True:
                kind, payload = await events.get()
                if kind == "step":
                    if payload.text:  # a pass whose text is held back (UTF-8, stop) sends nothing
                        yield _sse_data(shape.chunk(payload.text))
                        # Queued events are taken without yielding to the loop: let it see
                        # a client that left (else every later write to the dead socket
                        # logs "socket.send() raised exception." to stderr).
                        await asyncio.sleep(0)
                        if not seen_text:
                            seen_text = True
                            self.metrics.first_token.labels(endpoint=endpoint).observe(
                                time.monotonic() - t0
                            )
                elif kind == "gone":
                    return  # the client left just as the stream began
                elif kind == "done" and self._stopped_by_shutdown(payload):
                    status = "503"
                    yield _sse_data(self._shutdown_error(payload).body())
                    yield b"data: [DONE]\n\n"
                    return
                elif kind == "done":
                    result: GenerationResult = payload
                    reason = finish_reason(result.stats.stop_reason)
                    yield _sse_data(shape.chunk(None if req.chat else "", reason))
                    if req.include_usage:
                        yield _sse_data(shape.usage_chunk(result.stats, result.warnings))
                    yield b"data: [DONE]\n\n"
                    return
                else:
                    status = str(payload.status)
                    yield _sse_data(payload.body())
                    yield b"data: [DONE]\n\n"
                    return
        except BaseException:
            status = "499"  # cancelled: the client went away mid-stream
            raise
        finally:
            self.worker.cancel(job)  # no-op when finished; else the engine stops at its next pass
            self.metrics.requests.labels(endpoint=endpoint, status=status).inc()
            self.metrics.latency.labels(endpoint=endpoint).observe(time.monotonic() - t0)

    def close(self) -> None:
        self.worker.close()


def _sse_data(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n\n"


def create_app(
    engine: Engine | Callable[[], Engine],
    *,
    model_id: str,
    max_queue: int = 32,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    body_timeout: float = DEFAULT_BODY_TIMEOUT_S,
    default_max_tokens: int = 128,
    speculative: bool = True,
    token_healing: bool = True,
) -> Starlette:
    """A Starlette app serving ``engine``; ``app.state.server`` is the ``EngineApp``.

    ``engine`` may be a loader: it then runs on the engine's worker thread
    (``http/worker.py``), before this returns.
    """
    server = EngineApp(
        engine,
        model_id=model_id,
        max_queue=max_queue,
        max_body_bytes=max_body_bytes,
        body_timeout=body_timeout,
        default_max_tokens=default_max_tokens,
        speculative=speculative,
        token_healing=token_healing,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            server.close()

    app = Starlette(
        routes=[
            Route("/v1/models", server.models, methods=["GET"]),
            Route("/v1/models/{name:path}", server.model, methods=["GET"]),
            Route("/v1/completions", server.completions, methods=["POST"]),
            Route("/v1/chat/completions", server.chat_completions, methods=["POST"]),
            Route("/metrics", metrics_endpoint(server.metrics), methods=["GET"]),
            Route("/health", server.health, methods=["GET"]),
        ],
        exception_handlers={HTTPException: http_exception},
        lifespan=lifespan,
    )
    app.state.server = server
    return app
