"""The OpenAI-compatible HTTP API of moe-serve (FastAPI; docs/serving.md).

Requests are checked and turned into token ids here, handed to the engine
(engine.py), and its ids are turned back into text (text.py), whole or
streamed as server-sent events.
"""

import asyncio
import json
import logging
import secrets
import threading
import time
import uuid
from contextlib import asynccontextmanager
from typing import Any, Optional, Union

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from .engine import EngineClosed, GenerationRequest, QueueFull
from .images import (DEFAULT_MAX_IMAGE_BYTES, ImageError, image_prompt,
                     split_images, tile_layout)
from .metrics import Metrics
from .text import ChatTemplateError, TextModel, TextStream

log = logging.getLogger("moe-serve")


class ApiError(Exception):
    """An OpenAI-style error response."""

    def __init__(self, status: int, message: str, type_: str,
                 param: Optional[str] = None, code: Optional[str] = None):
        super().__init__(message)
        self.status, self.message, self.type = status, message, type_
        self.param, self.code = param, code

    def response(self) -> JSONResponse:
        return _error_response(self.status, self.message, self.type,
                               self.param, self.code)


def _error_response(status, message, type_, param=None, code=None):
    return JSONResponse(status_code=status, content={"error": {
        "message": message, "type": type_, "param": param, "code": code}})


def _invalid(message, param=None):
    return ApiError(400, message, "invalid_request_error", param)


class _Sampling(BaseModel):
    """What completions and chat completions share."""
    model_config = ConfigDict(extra="ignore")
    model: Optional[str] = None
    max_tokens: Optional[int] = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: Optional[int] = None
    stop: Union[str, list[Union[str, int]], None] = None
    stop_token_ids: Optional[list[int]] = None
    ignore_eos: bool = False
    n: int = 1
    stream: bool = False
    stream_options: Optional[dict[str, Any]] = None
    return_token_ids: bool = False


class CompletionBody(_Sampling):
    prompt: Union[str, list[int], list[str]]
    echo: bool = False
    logprobs: Optional[int] = None


class ChatBody(_Sampling):
    messages: list[dict[str, Any]]
    max_completion_tokens: Optional[int] = None
    add_generation_prompt: bool = True
    logprobs: Optional[bool] = None
    chat_template_kwargs: Optional[dict[str, Any]] = None


class Server:
    """State of one moe-serve process: the loaded text model, the engine
    (None until the plan is loaded) and the metrics."""

    def __init__(self, model_name: str, text: TextModel,
                 api_key: Optional[str], load_engine,
                 max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES):
        self.model_name = model_name
        self.max_image_bytes = max_image_bytes
        self.text = text
        self.api_key = api_key
        self.engine = None
        self.load_error: Optional[str] = None
        self.metrics = Metrics()
        self.created = int(time.time())
        self._load_engine = load_engine
        self.loaded = threading.Event()
        #: A plan of Llama 4's tiles: its prompt layout (images.TileLayout),
        #: or the ImageError that says why images are refused.
        self.tile_layout = None

    def load(self):
        """Loads the plan (on its own thread, while /health says 503)."""
        try:
            engine = self._load_engine()
        except Exception as e:
            self.load_error = f"{type(e).__name__}: {e}"
            log.error("moe-serve: error: %s", self.load_error)
            self.loaded.set()
            return
        if engine.vocab_size < self.text.vocab_size:
            log.warning("moe-serve: the tokenizer has %d tokens, more than "
                        "the plan's vocabulary of %d: prompts with the "
                        "others are refused", self.text.vocab_size,
                        engine.vocab_size)
        mm = engine.multimodal
        if mm is not None and mm.get("tile_size") and mm["image_processor"]:
            try:
                self.tile_layout = tile_layout(self.text.tokenizer,
                                               self.text.folder, mm)
            except ImageError as e:
                self.tile_layout = e
                log.warning("moe-serve: requests with images will be "
                            "refused: %s", e)
        self.metrics.engine = engine
        self.engine = engine
        log.info("moe-serve: serving %s: %s", self.model_name, engine.mode)
        self.loaded.set()

    # -- requests ---------------------------------------------------------

    def check_model(self, body: _Sampling):
        if body.model is not None and body.model != self.model_name:
            raise ApiError(404, f"The model '{body.model}' does not exist; "
                           f"this server serves '{self.model_name}'",
                           "invalid_request_error", "model",
                           "model_not_found")

    def sampling(self, body: _Sampling, prompt: list,
                 max_tokens: Optional[int], vision=None) -> tuple:
        """The engine's request and the stop strings."""
        engine = self.engine
        if body.n != 1:
            raise _invalid("only n=1 is supported", "n")
        if not prompt:
            raise _invalid("the prompt is empty", "prompt")
        bad = [t for t in prompt if not 0 <= t < engine.vocab_size]
        if bad:
            raise _invalid(f"token id {bad[0]} is outside the vocabulary "
                           f"[0, {engine.vocab_size})", "prompt")
        room = engine.max_seq - len(prompt)
        if max_tokens is None:
            max_tokens = room
        if max_tokens < 1:
            raise _invalid(f"max_tokens is {max_tokens}; it must be at least "
                           "1", "max_tokens")
        if max_tokens > room:
            raise _invalid(
                f"the prompt's {len(prompt)} tokens plus max_tokens "
                f"{max_tokens} make {len(prompt) + max_tokens}, more than "
                f"the model's context of {engine.max_seq} tokens",
                "max_tokens")
        if not 0 <= body.temperature <= 1e6:  # NaN too
            raise _invalid(f"temperature is {body.temperature}; it must be "
                           "0 (greedy) or more, at most 1e6", "temperature")
        if not 0 < body.top_p <= 1:
            raise _invalid(f"top_p is {body.top_p}; it must be in (0, 1]",
                           "top_p")
        top_k = 0 if body.top_k == -1 else body.top_k
        if top_k < 0:
            raise _invalid(f"top_k is {body.top_k}; it must be -1, 0 (all) "
                           "or more", "top_k")
        top_k = min(top_k, engine.vocab_size)  # the same: keep all
        stops = body.stop if isinstance(body.stop, list) else (
            [] if body.stop is None else [body.stop])
        stop_strings = [s for s in stops if isinstance(s, str)]
        stop_ids = [s for s in stops if isinstance(s, int)]
        stop_ids += body.stop_token_ids or []
        if not body.ignore_eos:
            stop_ids += self.text.eos_ids
        bad = [t for t in stop_ids if not 0 <= t < engine.vocab_size]
        if bad:
            raise _invalid(f"stop id {bad[0]} is outside the vocabulary "
                           f"[0, {engine.vocab_size})", "stop")
        seed = body.seed
        if seed is None:
            seed = secrets.randbits(63)
        seed &= (1 << 64) - 1  # the sampler's seed is 64 bits
        request = GenerationRequest(
            prompt=list(prompt), max_new_tokens=max_tokens,
            temperature=body.temperature, top_k=top_k, top_p=body.top_p,
            seed=seed, stop_ids=tuple(sorted(set(stop_ids))), vision=vision)
        return request, stop_strings

    def completion_prompt(self, body: CompletionBody) -> list:
        p = body.prompt
        if isinstance(p, list) and p and all(isinstance(x, str) for x in p):
            if len(p) != 1:
                raise _invalid("one prompt per request: give a string or a "
                               "list of token ids", "prompt")
            p = p[0]
        if isinstance(p, str):
            return self.text.encode(p)
        return list(p)

    def chat_messages(self, body: ChatBody) -> tuple:
        """The messages for the chat template and their images' bytes."""
        try:
            return split_images(body.messages, self.max_image_bytes)
        except ImageError as e:
            raise _invalid(str(e), "messages") from e

    def chat_prompt(self, body: ChatBody, messages: list, images: list
                    ) -> tuple:
        """The rendered messages' ids, with the images' tokens placed, and
        the vision inputs (None without images); decodes the images, so
        it runs off the event loop."""
        if images and self.engine.multimodal is None:
            raise _invalid(f"the model '{self.model_name}' takes no images "
                           "(its plan is not multimodal)", "messages")
        try:
            text = self.text.render_chat(
                messages, add_generation_prompt=body.add_generation_prompt,
                **(body.chat_template_kwargs or {}))
        except ChatTemplateError as e:
            raise _invalid(str(e), "messages") from e
        ids = self.text.encode(text, special=False)
        try:
            return image_prompt(ids, images, self.engine.multimodal,
                                self.engine.load_images, self.model_name,
                                self.tile_layout)
        except ImageError as e:
            raise _invalid(str(e), "messages") from e

    async def run(self, request: GenerationRequest, stop_strings,
                  http: Request):
        """Submits `request`, yields ("text", str, ids) for new ids as they
        come (with the text they make final, maybe none), then ("end",
        finish_reason, usage). Cancels the sequence if the consumer stops
        early or the client goes away."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        def on_token(token):
            loop.call_soon_threadsafe(queue.put_nowait, ("token", token))

        def on_finish(reason, error):
            loop.call_soon_threadsafe(queue.put_nowait,
                                      ("end", reason, error))

        try:
            seq = self.engine.submit(request, on_token, on_finish)
        except QueueFull as e:
            self.metrics.rejected.labels("429").inc()
            raise ApiError(429, f"the server is busy: {e}; try again later",
                           "rate_limit_exceeded", code="queue_full") from e
        except EngineClosed as e:
            raise ApiError(503, str(e), "server_error") from e
        self.metrics.prompt_tokens.inc(len(request.prompt))
        stream = TextStream(self.text, request.prompt, stop_strings,
                            request.stop_ids)
        tokens = 0
        ended = False
        try:
            while True:
                try:
                    item = await asyncio.wait_for(queue.get(), timeout=1.0)
                except asyncio.TimeoutError:
                    if await http.is_disconnected():
                        log.info("moe-serve: client went away; cancelling "
                                 "its sequence")
                        return
                    continue
                # The ids that came meanwhile go out together.
                text, ids = [], []
                while item[0] == "token":
                    if not stream.stopped:  # else drawn before the cancel
                        tokens += 1
                        ids.append(item[1])
                        text.append(stream.add(item[1]))
                        if stream.stopped:
                            seq.cancel()  # a stop string: no more ids
                    if queue.empty():
                        break
                    item = queue.get_nowait()
                if ids:
                    yield ("text", "".join(text), ids)
                if item[0] == "token":
                    continue
                ended = True
                _, reason, error = item
                self.metrics.observe(seq)
                if reason == "error" and seq.refused:
                    raise _invalid(error or "the runtime refused the "
                                   "request")
                if reason == "error":
                    raise ApiError(500, error or "generation failed",
                                   "server_error")
                if stream.stopped:
                    reason = "stop"
                else:
                    tail = stream.finish()
                    if tail:
                        yield ("text", tail, [])
                usage = {"prompt_tokens": len(request.prompt),
                         "completion_tokens": tokens,
                         "total_tokens": len(request.prompt) + tokens}
                yield ("end", reason, usage)
                return
        finally:
            if not ended:
                seq.cancel()
                # The sequence's end still comes; record it then.
                asyncio.ensure_future(self._record_when_done(queue, seq))

    async def _record_when_done(self, queue, seq):
        while True:
            item = await queue.get()
            if item[0] == "end":
                self.metrics.observe(seq)
                return


async def _parse(http: Request, model):
    """The body as `model`: JSON whatever the Content-Type says (curl -d
    sends form-encoded), else a 400."""
    raw = await http.body()
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise _invalid(f"the body is not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise _invalid("the body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ()))
        raise _invalid(f"{where}: {first.get('msg')}" if where else
                       str(first.get("msg")), where or None) from e


def create_app(server: Server) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app):
        threading.Thread(target=server.load, name="moe-serve-load",
                         daemon=True).start()
        yield
        if server.engine is not None:
            log.info("moe-serve: drained; stopping the engine")
            await asyncio.get_running_loop().run_in_executor(
                None, server.engine.shutdown)

    app = FastAPI(title="moe-serve", lifespan=lifespan, docs_url=None,
                  redoc_url=None, openapi_url=None)

    @app.exception_handler(ApiError)
    async def api_error(request, e: ApiError):
        return e.response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request, e: StarletteHTTPException):
        return _error_response(e.status_code, str(e.detail),
                               "invalid_request_error")

    @app.middleware("http")
    async def check_key(request: Request, call_next):
        path = request.url.path
        if server.api_key is not None and path.startswith("/v1"):
            given = request.headers.get("authorization", "")
            want = "Bearer " + server.api_key
            if not secrets.compare_digest(given.encode(), want.encode()):
                server.metrics.rejected.labels("401").inc()
                return _error_response(
                    401, "missing or wrong API key (Authorization: Bearer "
                    "KEY, moe-serve --api-key)", "invalid_request_error",
                    code="invalid_api_key")
        if path.startswith("/v1/") and request.method == "POST" and \
                server.engine is None:
            return _error_response(
                503, server.load_error or "the model is still loading",
                "server_error")
        return await call_next(request)

    @app.get("/health")
    async def health():
        if server.engine is None:
            return JSONResponse(status_code=503, content={
                "status": "error" if server.load_error else "loading",
                **({"error": server.load_error} if server.load_error
                   else {})})
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models():
        data = {"id": server.model_name, "object": "model",
                "created": server.created, "owned_by": "moec"}
        if server.engine is not None:
            data["max_model_len"] = server.engine.max_seq
        return {"object": "list", "data": [data]}

    @app.get("/metrics")
    async def metrics():
        return Response(generate_latest(server.metrics.registry),
                        media_type=CONTENT_TYPE_LATEST)

    @app.post("/v1/completions")
    async def completions(http: Request):
        body = await _parse(http, CompletionBody)
        server.check_model(body)
        if body.logprobs is not None:
            raise _invalid("logprobs are not supported", "logprobs")
        prompt = server.completion_prompt(body)
        request, stops = server.sampling(body, prompt, body.max_tokens)
        head = {"id": "cmpl-" + uuid.uuid4().hex, "object": "text_completion",
                "created": int(time.time()), "model": server.model_name}
        prefix = server.text.decode(prompt) if body.echo else ""
        return await _respond(server, request, stops, http, body, head,
                              False, prefix)

    @app.post("/v1/chat/completions")
    async def chat(http: Request):
        body = await _parse(http, ChatBody)
        server.check_model(body)
        if body.logprobs:
            raise _invalid("logprobs are not supported", "logprobs")
        messages, images = server.chat_messages(body)
        if images:  # decoding them takes a while: off the event loop
            prompt, vision = await asyncio.get_running_loop(
            ).run_in_executor(None, server.chat_prompt, body, messages,
                              images)
        else:
            prompt, vision = server.chat_prompt(body, messages, images)
        max_tokens = body.max_completion_tokens or body.max_tokens
        request, stops = server.sampling(body, prompt, max_tokens, vision)
        head = {"id": "chatcmpl-" + uuid.uuid4().hex,
                "object": "chat.completion", "created": int(time.time()),
                "model": server.model_name}
        return await _respond(server, request, stops, http, body, head,
                              True, "")

    return app


def _sse(data) -> str:
    return "data: " + json.dumps(data, ensure_ascii=False) + "\n\n"


async def _respond(server, request, stops, http, body, head, chat, prefix):
    """The whole response, or its SSE stream. With return_token_ids (as
    vLLM's) each choice or chunk also carries the ids it holds."""
    gen = server.run(request, stops, http)
    ids_too = body.return_token_ids
    # The first event comes before the response starts, so that a full
    # queue is a 429 and not a broken stream.
    try:
        first = await gen.__anext__()
    except StopAsyncIteration:  # the client went away
        return Response(status_code=499)

    def choice(text, reason, ids, delta):
        if chat and delta:
            c = {"index": 0, "delta": {} if text is None else
                 {"content": text}}
        elif chat:
            c = {"index": 0, "message": {"role": "assistant",
                                         "content": text}}
        else:
            c = {"index": 0, "text": text or ""}
        c.update(logprobs=None, finish_reason=reason)
        if ids_too:
            c["token_ids"] = ids
        return c

    if not body.stream:
        parts, ids, event = [prefix], [], first
        try:
            while event[0] == "text":
                parts.append(event[1])
                ids += event[2]
                event = await gen.__anext__()
        except StopAsyncIteration:
            return Response(status_code=499)
        finally:
            await gen.aclose()
        _, reason, usage = event
        out = {**head, "choices": [choice("".join(parts), reason, ids,
                                          False)], "usage": usage}
        return JSONResponse(out)

    include_usage = bool((body.stream_options or {}).get("include_usage"))
    chunk_head = dict(head, object="chat.completion.chunk") if chat else head

    async def events():
        try:
            if chat:
                yield _sse({**chunk_head, "choices": [{
                    "index": 0, "delta": {"role": "assistant", "content": ""},
                    "logprobs": None, "finish_reason": None}]})
            if prefix:
                yield _sse({**chunk_head, "choices": [
                    choice(prefix, None, [], True)]})
            event = first
            while event[0] == "text":
                if event[1] or ids_too:
                    yield _sse({**chunk_head, "choices": [
                        choice(event[1], None, event[2], True)]})
                event = await gen.__anext__()
            _, reason, usage = event
            yield _sse({**chunk_head, "choices": [
                choice(None, reason, [], True)], "usage": usage})
            if include_usage:
                yield _sse({**chunk_head, "choices": [], "usage": usage})
            yield "data: [DONE]\n\n"
        except StopAsyncIteration:  # the client went away
            return
        except ApiError as e:
            yield _sse({"error": {"message": e.message, "type": e.type,
                                  "param": e.param, "code": e.code}})
        finally:
            await gen.aclose()

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache"})
