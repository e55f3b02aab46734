"""Backends by name, imported only when chosen so CPU-only runs never import heavy packages."""

from __future__ import annotations

import importlib

from engine.base import EngineBackend
from settings.schema import EngineConfig

BACKENDS: dict[str, str] = {
    "sim": "engine.sim:SimEngine",
    "vllm": "engine.vllm_engine:VllmEngine",
    "openai": "engine.openai_upstream:OpenAIUpstreamEngine",
}


def create_engine(config: EngineConfig) -> EngineBackend:
    target = BACKENDS.get(config.backend)
    if target is None:
        raise ValueError(f"engine.backend: {config.backend!r} is not allowed; allowed: {', '.join(BACKENDS)}")
    module_name, _, class_name = target.partition(":")
    backend_cls = getattr(importlib.import_module(module_name), class_name)
    return backend_cls.from_config(config)
