"""Backends by name, imported only when chosen so CPU-only runs never import heavy packages."""

from __future__ import annotations

import importlib
import logging
import shutil
import subprocess

from engine.base import EngineBackend
from settings.schema import EngineConfig

log = logging.getLogger("gpt_oss_webui.engine")

BACKENDS: dict[str, str] = {
    "sim": "engine.sim:SimEngine",
    "vllm": "engine.vllm_engine:VllmEngine",
    "llamacpp": "engine.llamacpp_engine:LlamaCppEngine",
    "openai": "engine.openai_upstream:OpenAIUpstreamEngine",
}


def create_engine(config: EngineConfig) -> EngineBackend:
    name = chosen_backend(config.backend)
    target = BACKENDS.get(name)
    if target is None:
        raise ValueError(f"engine.backend: {config.backend!r} is not allowed; allowed: auto, {', '.join(BACKENDS)}")
    module_name, _, class_name = target.partition(":")
    backend_cls = getattr(importlib.import_module(module_name), class_name)
    return backend_cls.from_config(config)


def chosen_backend(backend: str) -> str:
    """`auto`: vLLM (its CUDA build) where an NVIDIA GPU is present; elsewhere llama.cpp, which ran
    the bundled model 3-6x faster than vLLM's CPU build on every CPU measured (docs/BENCHMARKS.md)."""
    if backend != "auto":
        return backend
    chosen = "vllm" if has_nvidia_gpu() else "llamacpp"
    log.info("engine.backend auto: %s (%s)", chosen, "NVIDIA GPU found" if chosen == "vllm" else "no NVIDIA GPU")
    return chosen


def has_nvidia_gpu() -> bool:
    """The same test as scripts/install-engine.sh, so the engine chosen is the one installed."""
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
