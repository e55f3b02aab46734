import pytest

from settings import ConfigError, load_config


def test_repository_config_and_presets_load(tmp_path):
    base = load_config("config.yaml")
    assert base.engine.backend == "auto" and base.scheduler.max_wait_s.low == 60
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
    cfg = load_config(
        None,
        overrides=[
            "scheduler.max_concurrency=3",
            "scheduler.max_wait_s.low=30",
            "engine.sim.token_latency_ms=0",
            "server.api_keys=a,b",
            "scheduler.priority_keys=[vip]",
            "logging.file=",
        ],
    )
    assert cfg.scheduler.max_concurrency == 3
    assert cfg.scheduler.max_wait_s.low == 30.0 and cfg.scheduler.max_wait_s.high == 300.0
    assert cfg.engine.sim.token_latency_ms == 0.0
    assert cfg.server.api_keys == ["a", "b"] and cfg.scheduler.priority_keys == ["vip"]
    assert cfg.logging.file == ""


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "scheduler.max_concurrency=-1",
            "scheduler.max_concurrency: -1 is not allowed; expected an integer between 0 and 4096",
        ),
        ("scheduler.max_concurrency=many", "scheduler.max_concurrency: 'many' is not allowed; expected an integer"),
        ("scheduler.max_wait_s.low=-1", "scheduler.max_wait_s.low: -1.0 is not allowed; expected a number >= 0.0"),
        (
            "engine.backend=tensorrt",
            "engine.backend: 'tensorrt' is not allowed; allowed: auto, vllm, llamacpp, sim, openai",
        ),
        ("logging.level=LOUD", "logging.level: 'LOUD' is not allowed; allowed: DEBUG, INFO, WARNING, ERROR"),
        ("scheduler.max_concurency=4", "scheduler.max_concurency: unknown key; allowed: max_concurrency,"),
        ("scheduler=4", "scheduler: expected a mapping, got 4"),
        ("novalue", "--set 'novalue': expected dotted.key=value"),
    ],
)
def test_bad_values_give_one_line_naming_key_and_allowed(override, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides=[override])
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_bad_files_and_presets(tmp_path):
    with pytest.raises(
        ConfigError, match="preset: 'huge' is not defined; allowed: personal, team, teaching, gpt-oss-20b"
    ):
        load_config("config.yaml", preset="huge")
    with pytest.raises(ConfigError, match="cannot be read"):
        load_config(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("server: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(broken)


def test_named_keys_inline_and_from_a_key_file(tmp_path):
    key_file = tmp_path / "keys.yaml"
    key_file.write_text("keys:\n  - {name: ci, key_sha256: " + "ab" * 32 + ", class: low, daily_tokens: 2000000}\n")
    cfg = load_config(
        None,
        overrides=[
            "server.keys=[{name: alice, key: sk-alice-123, class: medium, rpm: 60, tpm: 40000, max_parallel: 4}]",
            f"server.key_file={key_file}",
            "server.default_limits.rpm=10",
        ],
    )
    alice, ci = cfg.server.keys
    assert (alice.name, alice.priority_class, alice.rpm, alice.max_parallel) == ("alice", "medium", 60, 4)
    assert (ci.name, ci.priority_class, ci.daily_tokens, ci.key) == ("ci", "low", 2_000_000, None)
    assert ci.over(cfg.server.default_limits).rpm == 10 and alice.over(cfg.server.default_limits).rpm == 60


@pytest.mark.parametrize(
    "keys, message",
    [
        (
            "[{name: a, key: sk-1234567, key_sha256: " + "ab" * 32 + "}]",
            "server.keys.0: key 'a' needs exactly one of key",
        ),
        ("[{name: a}]", "server.keys.0: key 'a' needs exactly one of key and key_sha256"),
        ("[{name: anonymous, key: sk-1234567}]", "server.keys.0: the name 'anonymous' is kept"),
        (
            "[{name: a, key: sk-1234567}, {name: a, key: sk-7654321}]",
            "server: key names must be unique; repeated: ['a']",
        ),
        ("[{name: a, key: sk-1234567, class: urgent}]", "server.keys.0.class: 'urgent' is not allowed"),
        ("[{name: a, key: sk-1234567, rpm: 0}]", "server.keys.0.rpm: 0 is not allowed"),
        ("[{name: a, key: short}]", "server.keys.0.key: 'short' is not allowed"),
    ],
)
def test_bad_named_keys_give_one_line(keys, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides=[f"server.keys={keys}"])
    assert str(err.value).startswith(message), str(err.value)


def test_a_missing_key_file_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"server.key_file .*nope.yaml: cannot be read"):
        load_config(None, overrides=[f"server.key_file={tmp_path / 'nope.yaml'}"])
