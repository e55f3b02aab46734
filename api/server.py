"""The FastAPI application: lifespan (engine and scheduler), middleware, error handlers, routes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import AsyncIterator, Callable

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.utils import get_openapi

from api.access import router as access_router
from api.admin_keys import router as admin_keys_router
from api.batch_lines import build_runner
from api.batches import router as batches_router
from api.errors import install_error_handlers
from api.messages import router as messages_router
from api.middleware import BodyLimitAndRequestId
from api.ollama import router as ollama_router
from api.responses import router as responses_router
from api.responses_background import BackgroundResponses
from api.routes import router, unrouted
from batches.runner import BatchRunner
from cache.redis_store import CacheUnavailable
from monitor.metrics import Metrics
from pipeline.key_admin import load_keys
from pipeline.usage_file import restore
from protocols.openai_chat.request import ChatCompletionRequest
from protocols.openai_completions.request import CompletionRequest
from responses.redis_store import StoreUnavailable
from scheduler.learned_pace import LearnedPace
from scheduler.pace_file import engine_key
from wiring import Services

log = logging.getLogger("gpt_oss_webui")


def create_app(services: Services, on_engine_failure: Callable[[BaseException], None] | None = None) -> FastAPI:
    """`on_engine_failure` is called if the engine cannot start, so the process can exit instead of
    answering 503 forever."""

    background_responses = BackgroundResponses()  # the API's own: `background: true` responses
    batch_runner = build_runner(services)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await _open(services, batch_runner, on_engine_failure)
        background = _background_tasks(services, batch_runner, on_engine_failure)
        try:
            yield
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await _close(services, batch_runner, background_responses)

    app = FastAPI(title="GPT-OSS WebUI", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.services = services
    app.state.background = background_responses
    services.batch_runner = batch_runner
    app.state.metrics = Metrics(
        services.scheduler,
        services.cache,
        services.gpu,
        services.pipeline.abandoned,
        services.pipeline.usage,
        services.pipeline.tool_calls,
        batch_runner.lines_of,
    )
    app.add_middleware(
        BodyLimitAndRequestId,
        max_body_bytes=services.config.server.max_body_bytes,
        uploads={
            "/gradio_api/upload": services.config.ui.max_upload_bytes,
            "/v1/files": services.config.batches.max_file_bytes + 65_536,
        },
    )  # the form around it
    # Ours, so the page's Gradio adds none of its own (it would allow any localhost origin).
    app.add_middleware(
        CORSMiddleware,
        allow_origins=services.config.server.cors_origins,
        allow_methods=["*"],
        allow_headers=["*"],
        allow_credentials=False,
    )
    install_error_handlers(app)
    app.include_router(access_router)
    app.include_router(responses_router)
    app.include_router(messages_router)
    app.include_router(ollama_router)
    app.include_router(batches_router)
    app.include_router(admin_keys_router)
    app.include_router(router)
    app.include_router(
        unrouted(
            [access_router, responses_router, messages_router, ollama_router, batches_router, admin_keys_router, router]
        )
    )  # last: every other /v1 path
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]  # FastAPI's documented way
    return app


async def _open(
    services: Services, batch_runner: BatchRunner, on_failure: Callable[[BaseException], None] | None
) -> None:
    """The stores, the unfinished batches, usage and keys from disk; a store that cannot open
    stops the server (`on_failure`) with one line and no trace."""
    if services.keyring.any_keys and not services.keyring.any_admin:
        log.warning(
            "keys are set but none is an admin: admin actions (operator settings, clearing the cache, "
            "everyone's usage) are refused for every caller; name one with admin: true"
        )
    if services.cache is not None:
        try:
            await services.cache.open()
        except CacheUnavailable as exc:
            log.error("%s", exc)
            if on_failure is not None:
                on_failure(exc)
    try:
        await services.responses.open()
    except StoreUnavailable as exc:
        log.error("%s", exc)
        if on_failure is not None:
            on_failure(exc)
    await services.batches.open()
    await batch_runner.load()
    if services.usage_file is not None:
        await services.usage_file.open()
        await restore(services.usage_file, services.pipeline.usage, services.pipeline.limiter)
    if services.key_store is not None:
        await services.key_store.open()
        await load_keys(services.keyring, services.key_store)
    if services.pace_file is not None:
        try:
            await services.pace_file.open()
        except (OSError, sqlite3.Error) as exc:  # what it keeps is relearned in seconds: not worth stopping for
            log.warning("the pace file will not open (%s); the running limit learns the engine afresh", exc)
            services.pace_file = None
    if services.gpu is not None:
        services.gpu.start(asyncio.get_running_loop())


def _background_tasks(
    services: Services, batch_runner: BatchRunner, on_failure: Callable[[BaseException], None] | None
) -> list[asyncio.Task]:
    tasks = [
        asyncio.create_task(_start(services, on_failure), name="engine"),
        asyncio.create_task(batch_runner.run_forever(), name="batches"),
    ]
    if services.usage_file is not None:
        tasks.append(asyncio.create_task(services.usage_file.run_forever(), name="usage-file"))
    if services.alerts is not None:
        tasks.append(asyncio.create_task(services.alerts.run_forever(), name="alerts"))
    if services.shared_counts is not None:
        tasks.append(asyncio.create_task(services.shared_counts.run_forever(), name="shared-limits"))
    if services.shared_usage is not None:
        tasks.append(
            asyncio.create_task(services.shared_usage.run_forever(services.pipeline.usage), name="shared-usage")
        )
    return tasks


async def _close(services: Services, batch_runner: BatchRunner, background_responses: BackgroundResponses) -> None:
    if services.gpu is not None:
        services.gpu.stop()
    await services.scheduler.shutdown()
    await services.engine.stop()
    if services.cache is not None:
        await services.cache.close()
    await background_responses.stop()
    await batch_runner.stop()
    await services.responses.close()
    await services.batches.close()
    if services.usage_file is not None:
        await services.usage_file.close()
    if services.key_store is not None:
        await services.key_store.close()
    if services.pace_file is not None:
        await services.pace_file.close()


def _openapi(app: FastAPI) -> dict:
    """The generated document, plus the bodies the chat and text completion handlers parse
    themselves, so that clients and API fuzzers see the same constraints the handlers enforce."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
        schemas = schema.setdefault("components", {}).setdefault("schemas", {})
        for path, model in (("/v1/chat/completions", ChatCompletionRequest), ("/v1/completions", CompletionRequest)):
            body = model.model_json_schema(ref_template="#/components/schemas/{model}")
            schemas.update(body.pop("$defs", {}))
            schemas[model.__name__] = body
            schema["paths"][path]["post"]["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}},
            }
        app.openapi_schema = schema
    return app.openapi_schema


async def _start(services: Services, on_failure: Callable[[BaseException], None] | None) -> None:
    try:
        await services.engine.start()
    except Exception as exc:
        log.error("the engine failed to start: %s", exc, exc_info=log.isEnabledFor(logging.DEBUG))
        if on_failure is not None:
            on_failure(exc)
        return
    pace = await _kept_pace(services)
    await services.scheduler.start()
    if pace is not None:  # before anything is dispatched at the initial limit
        services.scheduler.relearn(pace)
    caps = services.engine.capabilities
    log.info(
        "engine ready: model=%s max_model_len=%d token_budget=%s", caps.model, caps.max_model_len, caps.token_budget
    )
    if services.pace_file is not None:
        await services.pace_file.keep_forever()


async def _kept_pace(services: Services) -> LearnedPace | None:
    """What the running limit learned of this engine before, if it was kept (scheduler/pace_file.py)."""
    if services.pace_file is None:
        return None
    engine = engine_key(services.config.engine.backend, services.engine.capabilities)
    try:
        return await services.pace_file.start(engine, services.scheduler.learned)
    except (OSError, sqlite3.Error) as exc:
        log.warning("the pace file could not be read (%s); the running limit learns the engine afresh", exc)
        return None
