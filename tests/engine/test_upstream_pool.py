"""Placing requests on upstreams, as a pure policy: least loaded, weights, health, prefix affinity."""

from __future__ import annotations

from engine.upstream_pool import Upstream, UpstreamPool, read_vllm_metrics


def pool(*loads: float, **kw) -> UpstreamPool:
    return UpstreamPool([Upstream(f"http://u{i}:8000/v1", running=load) for i, load in enumerate(loads)], **kw)


def test_the_least_loaded_healthy_upstream_is_picked():
    p = pool(5, 1, 3)
    assert p.pick().url == "http://u1:8000/v1"
    p.upstreams[1].in_flight = 9  # ours, not yet in its report
    assert p.pick().url == "http://u2:8000/v1"
    assert p.pick(exclude=(p.upstreams[2],)).url == "http://u0:8000/v1"


def test_weights_scale_the_load():
    p = pool(4, 3)
    p.upstreams[0].weight = 2.0  # twice the hardware
    assert p.pick().url == "http://u0:8000/v1"


def test_failing_upstreams_are_taken_out_and_brought_back():
    p = pool(0, 5, eject_after=2)
    first = p.upstreams[0]
    assert not p.failed(first) and first.healthy  # one failure is not enough
    assert p.failed(first) and not first.healthy
    assert p.pick() is p.upstreams[1]
    assert p.succeeded(first) and first.healthy and p.pick() is first
    p.upstreams[1].healthy = False
    first.healthy = False
    assert p.pick() is None


def test_a_prefix_keeps_its_upstream_unless_it_is_much_busier():
    p = pool(0, 0, 0, slots=32)  # slack: 4 sequences
    chosen = {p.pick("system prompt A").url for _ in range(5)}
    assert len(chosen) == 1
    favourite = next(u for u in p.upstreams if u.url in chosen)
    favourite.running = 3
    assert p.pick("system prompt A") is favourite  # within the slack
    favourite.running = 50
    assert p.pick("system prompt A") is not favourite
    favourite.running = 0
    spread = {p.pick(f"prompt {i}").url for i in range(40)}
    assert len(spread) == 3  # different prefixes spread over all
    assert UpstreamPool(p.upstreams, prefix_affinity=False).pick("system prompt A") is not favourite


def test_vllm_metrics_are_read_and_summed_over_models():
    upstream = Upstream("http://u:8000/v1")
    read_vllm_metrics(
        upstream,
        '# HELP x\nvllm:num_requests_running{model_name="a"} 3.0\n'
        'vllm:num_requests_running{model_name="b"} 2.0\nvllm:num_requests_waiting{model_name="a"} 7\n'
        'vllm:kv_cache_usage_perc{model_name="a"} 0.25\nvllm:other 9\n',
    )
    assert (upstream.running, upstream.waiting, upstream.kv_usage) == (5.0, 7.0, 0.25)
    assert upstream.root == "http://u:8000"


def test_a_prefix_never_waits_on_a_full_upstream():
    p = pool(0, 0, slots=8)
    favourite = p.pick("system prompt B")
    favourite.running = 8  # every slot taken: a request sent there would queue
    assert p.pick("system prompt B") is not favourite
    favourite.running = 1  # within the slack of one sequence
    assert p.pick("system prompt B") is favourite
