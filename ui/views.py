"""What the page shows, as HTML and Markdown: the header, an answer's details, the monitor table."""

from __future__ import annotations

import html

from pipeline.caller import Caller
from pipeline.events import Finished
from ui.accounts import usage_html
from ui.i18n import message
from wiring import Services


def answer_info(done: Finished, caller: Caller, priority: str, code: str) -> str:
    return details_text(answer_details(done, caller, priority), code)


def answer_details(done: Finished, caller: Caller, priority: str) -> dict:
    """What the line under an answer says, as data: the history keeps it with the answer."""
    details = {"caller": caller.name, "class": priority, "wait_s": done.queue_wait_s,
               "tokens": done.usage.completion_tokens, "tokens_per_s": done.tokens_per_s, "cached": done.cached,
               "finish_reason": done.finish_reason}
    return details if done.similarity is None else {**details, "similarity": done.similarity}


def details_text(details: dict, code: str) -> str:
    """The line under an answer, for one given now or one kept in the history."""
    speed = "–" if details.get("tokens_per_s") is None else details["tokens_per_s"]
    if details.get("similarity") is not None:
        cache = message(code, "similar_hit", similarity=float(details["similarity"]))
    else:
        cache = message(code, "yes" if details.get("cached") else "no")
    return message(code, "info", caller=details.get("caller", ""), priority=details.get("class", ""),
                   wait=float(details.get("wait_s") or 0.0), tokens=details.get("tokens", 0), speed=speed,
                   cache=cache)


def header_html(services: Services, caller: Caller | None, code: str) -> str:
    """Product, served model, engine state and who is signed in (with a sign-out button)."""
    engine = services.engine
    state = message(code, "ready" if engine.ready else "loading")
    user = ""
    if caller is not None:
        user = f" · {html.escape(message(code, 'signed_in', name=caller.name))}"
        if services.keyring.any_keys:
            user += (f' <form method="post" action="/signout"><button id="sign-out">'
                     f'{html.escape(message(code, "sign_out"))}</button></form>')
    usage = usage_html(services, caller, code) if caller is not None else ""
    return (f'<div><strong style="font-size:1.25em">GPT-OSS WebUI</strong> · '
            f'<code>{html.escape(engine.capabilities.model)}</code> · '
            f'<span id="engine-state">{state}</span>{user}</div>{usage}')


def monitor_markdown(s: dict, code: str) -> str:
    if s["gpus"]:
        memory = "\n".join(f"- GPU {g['index']} {g['name']}: {g['used_gb']:.1f} / {g['total_gb']:.1f} GiB, "
                           f"{g['utilization_pct']:.0f}% busy" for g in s["gpus"])
    else:
        kv = "–" if s["kv_usage_pct"] is None else f"{s['kv_usage_pct']:.1f}%"
        memory = (f"{message(code, 'no_gpu')}\n\n- process memory: {s['process_memory_gb']:.2f} GiB\n"
                  f"- KV cache in use: {kv}")
    waiting = s["waiting"]
    hit = "–" if s["cache_hit_rate"] is None else f"{100 * s['cache_hit_rate']:.0f}%"
    tpot = "–" if s["tpot_s"] is None else f"{1000 * s['tpot_s']:.0f} ms"
    return (f"{memory}\n\n| waiting high / medium / low | running / limit | time per token (objective) | avg wait | "
            f"tokens/s | cache hit rate | emergency | admissions |\n|---|---|---|---|---|---|---|---|\n"
            f"| {waiting['high']} / {waiting['medium']} / {waiting['low']} | {s['running']} / {s['slots']} | "
            f"{tpot} ({1000 * s['tpot_objective_s']:.0f} ms) | {s['avg_wait_s']:.1f} s | {s['tokens_per_s']:.1f} | "
            f"{hit} | "
            f"{'ON' if s['emergency'] else 'off'} | {'paused' if s['admission_paused'] else 'open'} |")


class ShownAnswer:
    """The chat while an answer streams: the history, a "Thinking" block (a titled message, which
    the chatbot folds) while the model reasons, then the answer below it."""

    def __init__(self, history: list[dict], thinking_title: str) -> None:
        self.history = history
        self.title = thinking_title
        self.thinking: dict | None = None
        self.answer = {"role": "assistant", "content": ""}

    def think(self, text: str) -> None:
        if self.thinking is None:
            self.thinking = {"role": "assistant", "content": "", "metadata": {"title": self.title, "status": "pending"}}
        self.thinking["content"] += text

    def say(self, text: str) -> None:
        self.stop_thinking()
        self.answer["content"] += text

    def finish(self, text: str, reasoning: str) -> None:
        if reasoning:
            self.think("")
            if self.thinking is not None:
                self.thinking["content"] = reasoning
        self.stop_thinking()
        self.answer["content"] = text

    def stop_thinking(self) -> None:
        if self.thinking is not None:
            self.thinking["metadata"] = {"title": self.title, "status": "done"}

    def messages(self) -> list[dict]:
        """A new list of new dicts each time, so the page sees every change."""
        thinking = [{**self.thinking, "metadata": dict(self.thinking["metadata"])}] if self.thinking else []
        return [*self.history, *thinking, dict(self.answer)]
