"""POST /tokenize, vLLM's chat form: the count a completion's prompt takes, behind the same keys."""

from __future__ import annotations

import httpx

from tests.conftest import live_server

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "how many tokens is this?"}]


def test_the_count_is_the_prompt_a_completion_takes() -> None:
    with live_server() as live:
        counted = httpx.post(live.url + "/tokenize", json={"model": "sim", "messages": MESSAGES}, timeout=10)
        assert counted.status_code == 200
        body = counted.json()
        answer = live.client().chat.completions.create(model="sim", messages=MESSAGES, max_tokens=2)
        assert body["count"] == answer.usage.prompt_tokens > 0
        assert body["max_model_len"] == live.client().models.list().data[0].max_model_len
        text = "Once upon a time there was a queue."
        counted = httpx.post(live.url + "/tokenize", json={"model": "sim", "prompt": text}, timeout=10).json()
        answer = live.client().completions.create(model="sim", prompt=text, max_tokens=2)
        assert counted["count"] == answer.usage.prompt_tokens > 0  # vLLM's completion form: a text completion's
        odd = httpx.post(live.url + "/tokenize", json={"prompt": text, "add_special_tokens": False}, timeout=10)
        assert odd.status_code == 400 and odd.json()["error"]["param"] == "add_special_tokens"


def test_bad_calls_get_openai_errors() -> None:
    with live_server("server.api_keys=[sk-tok-0001]") as live:
        url = live.url + "/tokenize"
        auth = {"Authorization": "Bearer sk-tok-0001"}
        cases = [
            ({}, {"messages": MESSAGES}, 401, None),
            (auth, {"messages": []}, 400, "messages"),
            (auth, {"model": "other", "messages": MESSAGES}, 404, "model"),
            (auth, {"messages": [{"role": "user", "content": 3}]}, 400, "messages.0.content"),
            (auth, {"messages": MESSAGES, "add_generation_prompt": False}, 400, "add_generation_prompt"),
            (auth, {"messages": MESSAGES, "return_token_strs": True}, 400, "return_token_strs"),
            (auth, {"messages": MESSAGES, "add_generation_prompt": True, "chat_template_kwargs": {"x": 1}}, 200, None),
            (auth, {"messages": MESSAGES, "add_special_tokens": False, "continue_final_message": False}, 200, None),
            (
                auth,
                {"messages": MESSAGES, "chat_template_kwargs": {"chat_template": "{{ 1 }}"}},
                400,
                "chat_template_kwargs.chat_template",
            ),
        ]
        for headers, body, status, param in cases:
            r = httpx.post(url, json=body, headers=headers, timeout=10)
            assert r.status_code == status, body
            if status == 200:
                continue
            assert (
                set(r.json()["error"]) == {"message", "type", "param", "code"} and r.json()["error"]["param"] == param
            )
        assert (
            httpx.post(url, content=b"{", headers={**auth, "Content-Type": "application/json"}, timeout=10).json()[
                "error"
            ]["code"]
            == "invalid_json"
        )
        assert httpx.post(url, json={"messages": MESSAGES}, headers=auth, timeout=10).status_code == 200


def test_counts_are_held_to_the_keys_rpm_in_a_window_of_their_own() -> None:
    with live_server("server.keys=[{name: gw, key: sk-gw-000001, rpm: 2}]") as live:
        auth = {"Authorization": "Bearer sk-gw-000001"}
        for _ in range(2):
            assert httpx.post(live.url + "/tokenize", json={"messages": MESSAGES}, headers=auth).status_code == 200
        refused = httpx.post(live.url + "/tokenize", json={"messages": MESSAGES}, headers=auth)
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        error = refused.json()["error"]
        assert error["code"] == "rate_limit_exceeded" and "2 token counts per minute" in error["message"]
        answer = live.client(api_key="sk-gw-000001").chat.completions.create(
            model="sim", messages=MESSAGES, max_tokens=2
        )
        assert answer.usage.prompt_tokens > 0  # the requests' own window is untouched
