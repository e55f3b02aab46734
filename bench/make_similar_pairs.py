"""Generate bench/data/similar_pairs.jsonl: labelled prompt pairs for the similar-question cache.

    .venv/bin/python bench/make_similar_pairs.py    # deterministic (seed 25): the file is committed

Templates x fillers, in English and Chinese, across chat questions, code requests and templated
script prompts. Each filled template gives pairs that should share an answer (`share`: a reordered
clause, a typo, whitespace and punctuation, politeness words, case) and hard negatives (`differ`:
negation, an antonym, swapped entities, another number, unit, identifier, flag or language),
each made by changing exactly the one thing its kind names, so a hit on a `differ` pair is a
wrong answer. Chinese "typos" are a doubled character (homophone slips would be refused by the
vocabulary guard, and are not claimed).

A template is a list of clauses (reordered by swapping two) with slots:
  {P}   a word with an opposite (turn on / turn off)      -> antonym negative
  {NEG} empty, or a negation                              -> negation negative
  {N}   a number; {U} a unit                              -> number, unit negatives
  {A} {B} two entities whose order decides                -> swapped-entities negative
  {ID}  a code identifier; {F} a command-line flag        -> identifier, flag negatives
  {L}   a language (programming or natural)               -> language negative
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

SEED = 25
OUT = Path(__file__).parent / "data" / "similar_pairs.jsonl"

POLAR_EN = [
    ("turn on", "turn off"),
    ("enable", "disable"),
    ("increase", "decrease"),
    ("add", "remove"),
    ("show", "hide"),
    ("open", "close"),
    ("upload", "download"),
    ("import", "export"),
    ("encrypt", "decrypt"),
    ("install", "uninstall"),
]
POLAR_ZH = [
    ("打开", "关闭"),
    ("启用", "禁用"),
    ("增加", "减少"),
    ("添加", "删除"),
    ("显示", "隐藏"),
    ("上传", "下载"),
    ("导入", "导出"),
    ("加密", "解密"),
    ("安装", "卸载"),
]
UNITS_EN = [
    ("km", "miles"),
    ("kg", "pounds"),
    ("MB", "GB"),
    ("seconds", "minutes"),
    ("celsius", "fahrenheit"),
    ("dollars", "euros"),
]
UNITS_ZH = [("公里", "英里"), ("公斤", "斤"), ("秒", "分钟"), ("美元", "欧元"), ("厘米", "英寸")]
ENT_EN = [
    ("Beijing", "Shanghai"),
    ("Paris", "London"),
    ("Alice", "Bob"),
    ("the client", "the server"),
    ("PostgreSQL", "MySQL"),
    ("Berlin", "Munich"),
    ("the cat", "the dog"),
    ("Tokyo", "Osaka"),
]
ENT_ZH = [("北京", "上海"), ("广州", "深圳"), ("小明", "小红"), ("客户端", "服务器"), ("杭州", "南京"), ("猫", "狗")]
IDS = [
    ("get_user", "get_users"),
    ("parseConfig", "parseConfigs"),
    ("load_model", "save_model"),
    ("max_cost", "max_heads"),
    ("UserService", "UserServices"),
    ("os.path.join", "os.path.split"),
    ("fetch_rows", "fetch_row"),
    ("readFile", "writeFile"),
]
FLAGS = [
    ("--max-cost", "--max-heads"),
    ("--verbose", "--quiet"),
    ("--dry-run", "--force"),
    ("-r", "-f"),
    ("--no-cache", "--cache"),
    ("--batch-size=8", "--batch-size=16"),
    ("--port 8000", "--port 8080"),
]
LANGS_EN = [
    ("Python", "Rust"),
    ("Go", "Java"),
    ("JavaScript", "TypeScript"),
    ("English", "French"),
    ("C++", "C#"),
    ("Bash", "PowerShell"),
]
LANGS_ZH = [("Python", "Go"), ("中文", "英文"), ("Java", "Rust"), ("日语", "韩语")]
NEG_EN = ["not ", "never "]
NEG_ZH = ["不", "没有"]

# (lang, domain, clauses); slots as in the module docstring
TEMPLATES: list[tuple[str, str, list[str]]] = [
    ("en", "chat", ["How do I {P} notifications on my phone", "without losing my settings"]),
    ("en", "chat", ["What is the fastest way to travel from {A} to {B}", "if I leave on a weekday morning"]),
    ("en", "chat", ["Why does my bread {NEG}rise in the oven", "when I use fresh yeast"]),
    ("en", "chat", ["Convert {N} {U} into a rough everyday comparison", "for a school presentation"]),
    ("en", "chat", ["Should I {NEG}water the tomato plants every day", "during a hot summer"]),
    ("en", "chat", ["Write a short polite email to {A} about the meeting with {B}", "in a friendly tone"]),
    ("en", "chat", ["Translate this greeting into {L}", "keeping it formal"]),
    ("en", "chat", ["Explain how to {P} two-factor authentication", "for my email account"]),
    ("en", "chat", ["Plan a {N} day itinerary for visiting museums", "on a small budget"]),
    (
        "en",
        "code",
        ["Write a {L} function that reads a CSV file and returns the rows as dictionaries", "skipping empty lines"],
    ),
    ("en", "code", ["Explain what the {ID} function does", "in the user module"]),
    ("en", "code", ["What does the {F} option change in the training script", "compared to the defaults"]),
    ("en", "code", ["Why does this loop {NEG}terminate after {N} iterations", "in my sorting routine"]),
    ("en", "code", ["How do I {P} a package with pip", "inside a virtual environment"]),
    ("en", "code", ["Refactor {ID} to use a dictionary lookup", "keeping the same behaviour"]),
    ("en", "code", ["Write a SQL query that copies rows from {A} to {B}", "for orders placed yesterday"]),
    ("en", "code", ["Implement binary search in {L}", "returning the index or minus one"]),
    ("en", "script", ["Summarise the following ticket in {N} bullet points", "for the weekly report"]),
    ("en", "script", ["Classify this review as positive or negative", "and answer in {L}"]),
    (
        "en",
        "script",
        ["Generate a commit message for a change that {P}s caching in the parser", "in the imperative mood"],
    ),
    ("en", "script", ["Run the migration with {F}", "and report which tables change"]),
    ("en", "script", ["Extract every date from the log file", "and convert the durations to {U}"]),
    ("zh", "chat", ["怎么在手机上{P}通知", "不影响其他设置"]),
    ("zh", "chat", ["从{A}到{B}最快的交通方式是什么", "工作日早上出发"]),
    ("zh", "chat", ["为什么面包在烤箱里{NEG}膨胀", "我用的是新鲜酵母"]),
    ("zh", "chat", ["把{N}{U}换算成日常生活中的比较", "用于课堂展示"]),
    ("zh", "chat", ["帮{A}给{B}写一封感谢信", "语气要真诚"]),
    ("zh", "chat", ["夏天每天都{NEG}需要给番茄浇水吗", "天气很热的时候"]),
    ("zh", "chat", ["把这句问候翻译成{L}", "保持正式语气"]),
    ("zh", "code", ["用{L}写一个读取CSV文件的函数", "跳过空行"]),
    ("zh", "code", ["解释{ID}函数的作用", "在用户模块里"]),
    ("zh", "code", ["训练脚本里的{F}参数有什么作用", "和默认值相比"]),
    ("zh", "code", ["这个循环为什么在{N}次迭代后{NEG}停止", "在排序代码里"]),
    ("zh", "code", ["如何用pip{P}一个包", "在虚拟环境里"]),
    ("zh", "script", ["用{N}条要点总结下面的工单", "用于周报"]),
    ("zh", "script", ["判断这条评论是正面还是负面", "并用{L}回答"]),
    ("zh", "script", ["把日志里的时长都换算成{U}", "并列出所有日期"]),
    ("zh", "script", ["生成一条提交信息，说明这次改动{P}了解析器的缓存", "使用祈使语气"]),
]
FILLERS_EN = ["Please ", "Can you tell me: ", "Hi, ", "Quick question: "]
FILLERS_ZH = ["请", "请问", "帮我看看，", "你好，"]


def fill(rng: random.Random, lang: str, clauses: list[str]) -> list[tuple[dict[str, str], dict[str, str], str]]:
    """The base slot values and, per negative kind, the slot values that change the meaning."""
    zh = lang == "zh"
    text = " ".join(clauses)
    base: dict[str, str] = {"NEG": ""}
    negatives: list[tuple[dict[str, str], str]] = []
    if "{P}" in text:
        a, b = rng.choice(POLAR_ZH if zh else POLAR_EN)
        base["P"] = a
        negatives.append(({"P": b}, "antonym"))
    if "{NEG}" in text:
        negatives.append(({"NEG": rng.choice(NEG_ZH if zh else NEG_EN)}, "negation"))
    if "{N}" in text:
        n = rng.choice([2, 3, 5, 7, 10, 12, 20, 100])
        base["N"] = str(n)
        negatives.append(({"N": str(n + rng.choice([1, 2, 10]))}, "number"))
    if "{U}" in text:
        a, b = rng.choice(UNITS_ZH if zh else UNITS_EN)
        base["U"] = a
        negatives.append(({"U": b}, "unit"))
    if "{A}" in text:
        a, b = rng.choice(ENT_ZH if zh else ENT_EN)
        base["A"], base["B"] = a, b
        negatives.append(({"A": b, "B": a}, "swapped_entities"))
    if "{ID}" in text:
        a, b = rng.choice(IDS)
        base["ID"] = a
        negatives.append(({"ID": b}, "identifier"))
    if "{F}" in text:
        a, b = rng.choice(FLAGS)
        base["F"] = a
        negatives.append(({"F": b}, "flag"))
    if "{L}" in text:
        a, b = rng.choice(LANGS_ZH if zh else LANGS_EN)
        base["L"] = a
        negatives.append(({"L": b}, "language"))
    return [(base, {**base, **change}, kind) for change, kind in negatives]


def render(lang: str, clauses: list[str], values: dict[str, str], order: list[int] | None = None) -> str:
    parts = [re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], c) for c in clauses]
    parts = [parts[i] for i in order] if order else parts
    if lang == "zh":
        return "，".join(parts) + "？"
    joined = ", ".join(p[0].lower() + p[1:] if i else p for i, p in enumerate(parts))
    return joined[0].upper() + joined[1:] + "?"


def typo(rng: random.Random, lang: str, text: str) -> str:
    if lang == "zh":
        i = rng.choice([i for i, c in enumerate(text) if "\u4e00" <= c <= "\u9fff"])
        return text[: i + 1] + text[i] + text[i + 1 :]
    words = [m for m in re.finditer(r"\b[a-z]{6,}\b", text)] or list(re.finditer(r"\b[A-Za-z]{5,}\b", text))
    m = rng.choice(words)
    w = m.group(0)
    i = rng.randrange(1, len(w) - 2)
    kind = rng.choice(["swap", "drop", "double"])
    new = (
        w[:i] + w[i + 1] + w[i] + w[i + 2 :]
        if kind == "swap"
        else w[:i] + w[i + 1 :]
        if kind == "drop"
        else w[:i] + w[i] + w[i:]
    )
    return text[: m.start()] + new + text[m.end() :]


def punctuation(rng: random.Random, lang: str, text: str) -> str:
    if lang == "zh":
        return rng.choice(
            [text.replace("，", ", ").rstrip("？") + "?", " " + text.replace("，", "  ，"), text.rstrip("？") + "。"]
        )
    return rng.choice(
        [
            text.rstrip("?").replace(",", ";") + ".",
            "  " + text.replace(" ", "  ") + " ",
            text.lower().rstrip("?") + "??",
            text.replace(", ", " - "),
        ]
    )


def polite(rng: random.Random, lang: str, text: str) -> str:
    head = rng.choice(FILLERS_ZH if lang == "zh" else FILLERS_EN)
    return head + (text if lang == "zh" else text[0].lower() + text[1:])


def pairs(seed: int = SEED, fills: int = 5) -> list[dict]:
    rng = random.Random(seed)
    out: list[dict] = []
    for t, (lang, domain, clauses) in enumerate(TEMPLATES):
        for f in range(fills):
            filled = fill(rng, lang, clauses)
            base_values = filled[0][0]
            base = render(lang, clauses, base_values)
            group = f"t{t}f{f}"
            shares = [
                ("reorder", render(lang, clauses, base_values, order=list(reversed(range(len(clauses)))))),
                ("typo", typo(rng, lang, base)),
                ("punctuation", punctuation(rng, lang, base)),
                ("politeness", polite(rng, lang, base)),
            ]
            for kind, variant in shares:
                out.append({"label": "share", "kind": kind, "a": base, "b": variant})
            for _, values, kind in filled:  # the change alone, then the change inside a paraphrase
                out.append({"label": "differ", "kind": kind, "a": base, "b": render(lang, clauses, values)})
                disguised = rng.choice(
                    [
                        render(lang, clauses, values, order=list(reversed(range(len(clauses))))),
                        punctuation(rng, lang, render(lang, clauses, values)),
                        polite(rng, lang, render(lang, clauses, values)),
                    ]
                )
                out.append({"label": "differ", "kind": kind, "a": base, "b": disguised})
            for item in out[-(len(shares) + 2 * len(filled)) :]:
                item.update(lang=lang, domain=domain, group=group)
    return [{"id": i, **p} for i, p in enumerate(out)]


def main() -> None:
    rows = pairs()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    share = sum(r["label"] == "share" for r in rows)
    print(f"{len(rows)} pairs ({share} share, {len(rows) - share} differ) -> {OUT}")


if __name__ == "__main__":
    main()
