"""Tensor and pipeline parallelism reach vLLM's own AsyncEngineArgs (the CPU build is enough to
check the arguments; running them needs the GPUs)."""

from __future__ import annotations

import pytest

from engine.vllm_engine import engine_arguments
from settings import load_config

pytestmark = pytest.mark.vllm


def test_parallelism_reaches_vllms_own_engine_arguments(vllm_installed):
    from vllm.engine.arg_utils import AsyncEngineArgs

    cfg = load_config(
        "config.yaml",
        preset="gpt-oss-20b",
        overrides=[
            "engine.vllm.model=openai/gpt-oss-120b",
            "engine.vllm.tensor_parallel_size=4",
            "engine.vllm.pipeline_parallel_size=2",
            "engine.vllm.distributed_executor_backend=ray",
        ],
    ).engine.vllm
    args = AsyncEngineArgs(**engine_arguments(cfg, cfg.model, AsyncEngineArgs))
    assert (args.tensor_parallel_size, args.pipeline_parallel_size) == (4, 2)
    assert args.distributed_executor_backend == "ray" and args.model == "openai/gpt-oss-120b"
    default = AsyncEngineArgs(**engine_arguments(load_config("config.yaml").engine.vllm, "m", AsyncEngineArgs))
    assert default.pipeline_parallel_size == 1 and default.distributed_executor_backend is None
