"""The vLLM backend's pure parts (no vllm import): engine arguments and bundled model files."""

from __future__ import annotations

import dataclasses

import pytest

from engine.base import EngineError
from engine.kv_size import available_bytes, default_cpu_kv_bytes
from engine.model_files import ModelFileError, resolve_model
from engine.vllm_engine import cpu_dtype, engine_arguments
from settings import load_config


@dataclasses.dataclass
class FakeEngineArgs:
    model: str = ""
    dtype: str = "auto"
    swap_space: float = 4


def test_engine_arguments_from_the_default_config():
    cfg = load_config("config.yaml").engine.vllm
    kwargs = engine_arguments(cfg, "/models/x", FakeEngineArgs)
    assert kwargs["model"] == "/models/x" and kwargs["served_model_name"] == "smollm2-135m-instruct"
    assert kwargs["scheduling_policy"] == "priority" and kwargs["enable_prefix_caching"] is True
    assert "kv_cache_memory_bytes" not in kwargs and "block_size" not in kwargs  # GPUs: memory utilisation
    on_cpu = engine_arguments(cfg, "/models/x", FakeEngineArgs, on_cpu=True)
    assert 256 * 2**20 <= on_cpu["kv_cache_memory_bytes"] <= 4096 * 2**20
    fixed = load_config("config.yaml", overrides=["engine.vllm.kv_cache_memory_bytes=1073741824"]).engine.vllm
    assert engine_arguments(fixed, "m", FakeEngineArgs, on_cpu=True)["kv_cache_memory_bytes"] == 2**30


def test_the_cpu_dtype_follows_the_cpus_bf16_support():
    assert cpu_dtype("processor: 0\nflags\t\t: fpu sse avx2 fma\n") == "float32"
    assert cpu_dtype("flags : avx2 avx512f avx512_bf16\n") == "bfloat16"
    assert cpu_dtype("flags : avx2 amx_bf16 amx_tile\n") == "bfloat16"
    assert cpu_dtype("") == "float32"
    cfg = load_config(None, overrides=["engine.vllm.extra_args={dtype: bfloat16}"]).engine.vllm
    assert engine_arguments(cfg, "m", FakeEngineArgs, on_cpu=True)["dtype"] == "bfloat16"  # extra_args win


def test_cpu_kv_cache_is_a_share_of_available_memory_between_a_floor_and_a_cap():
    gib = 2**30
    assert default_cpu_kv_bytes(available=20 * gib) == 2 * gib
    assert default_cpu_kv_bytes(available=1 * gib) == 256 * 2**20
    assert default_cpu_kv_bytes(available=100 * gib) == 4 * gib
    assert available_bytes("MemTotal: 100 kB\nMemAvailable:    2048 kB\n") == 2048 * 1024
    assert available_bytes("nothing here") is None


def test_gpu_preset_sizes_the_cache_by_memory_utilisation():
    cfg = load_config("config.yaml", preset="gpt-oss-20b").engine.vllm
    kwargs = engine_arguments(cfg, cfg.model, FakeEngineArgs)
    assert "kv_cache_memory_bytes" not in kwargs and kwargs["gpu_memory_utilization"] == 0.92
    assert kwargs["max_num_seqs"] == 128 and kwargs["max_model_len"] == 8192 and kwargs["enforce_eager"] is False


def test_extra_args_must_be_real_engine_arguments():
    cfg = load_config(None, overrides=["engine.vllm.extra_args={dtype: bfloat16}"]).engine.vllm
    assert engine_arguments(cfg, "m", FakeEngineArgs)["dtype"] == "bfloat16"
    bad = load_config(None, overrides=["engine.vllm.extra_args={max_num_seqz: 4}"]).engine.vllm
    with pytest.raises(EngineError, match="engine.vllm.extra_args.max_num_seqz: not an argument"):
        engine_arguments(bad, "m", FakeEngineArgs)


def test_model_paths_and_bundled_names(tmp_path):
    assert resolve_model("/srv/models/gpt-oss-20b", tmp_path) == "/srv/models/gpt-oss-20b"
    with pytest.raises(ModelFileError, match="allowed: bundled:smollm2-135m-instruct"):
        resolve_model("bundled:llama-70b", tmp_path)
    done = tmp_path / "smollm2-135m-instruct"
    done.mkdir()
    (done / ".converted").write_text("x")
    assert resolve_model("bundled:smollm2-135m-instruct", tmp_path) == str(done)  # no second conversion
