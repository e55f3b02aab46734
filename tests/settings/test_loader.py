import pytest

from settings import ConfigError, load_config


def test_repository_config_and_presets_load(tmp_path):
    base = load_config("config.yaml")
    assert base.engine.backend == "vllm" and base.scheduler.max_wait_s.low == 60
    assert base.engine.vllm.model == "bundled:smollm2-135m-instruct"
    team = load_config("config.yaml", preset="team")
    assert team.scheduler.max_concurrency == 0 and team.scheduler.limit.adaptive  # the engine's slots, adaptive
    teaching = load_config("config.yaml", preset="teaching")
    assert teaching.server.default_max_tokens == 512 and teaching.scheduler.max_queue_size == 1024
    gpu = load_config("config.yaml", preset="team,gpt-oss-20b")
    assert gpu.engine.vllm.model == "openai/gpt-oss-20b" and gpu.engine.vllm.max_model_len == 8192
    assert gpu.engine.vllm.kv_cache_memory_bytes == 0 and gpu.engine.vllm.max_num_seqs == 128
    assert gpu.scheduler.max_queue_size == 256  # from team


def test_overrides_are_typed_from_the_schema():
    cfg = load_config(None, overrides=[
        "scheduler.max_concurrency=3", "scheduler.max_wait_s.low=30", "engine.sim.token_latency_ms=0",
        "server.api_keys=a,b", "scheduler.priority_keys=[vip]", "logging.file=",
    ])
    assert cfg.scheduler.max_concurrency == 3
    assert cfg.scheduler.max_wait_s.low == 30.0 and cfg.scheduler.max_wait_s.high == 300.0
    assert cfg.engine.sim.token_latency_ms == 0.0
    assert cfg.server.api_keys == ["a", "b"] and cfg.scheduler.priority_keys == ["vip"]
    assert cfg.logging.file == ""


@pytest.mark.parametrize("override, message", [
    ("scheduler.max_concurrency=-1", "scheduler.max_concurrency: -1 is not allowed; expected an integer between 0 and 4096"),
    ("scheduler.max_concurrency=many", "scheduler.max_concurrency: 'many' is not allowed; expected an integer"),
    ("scheduler.max_wait_s.low=-1", "scheduler.max_wait_s.low: -1.0 is not allowed; expected a number >= 0.0"),
    ("engine.backend=tensorrt", "engine.backend: 'tensorrt' is not allowed; allowed: vllm, sim"),
    ("logging.level=LOUD", "logging.level: 'LOUD' is not allowed; allowed: DEBUG, INFO, WARNING, ERROR"),
    ("scheduler.max_concurency=4", "scheduler.max_concurency: unknown key; allowed: max_concurrency,"),
    ("scheduler=4", "scheduler: expected a mapping, got 4"),
    ("novalue", "--set 'novalue': expected dotted.key=value"),
])
def test_bad_values_give_one_line_naming_key_and_allowed(override, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides=[override])
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_bad_files_and_presets(tmp_path):
    with pytest.raises(ConfigError, match="preset: 'huge' is not defined; allowed: personal, team, teaching, gpt-oss-20b"):
        load_config("config.yaml", preset="huge")
    with pytest.raises(ConfigError, match="cannot be read"):
        load_config(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("server: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(broken)
