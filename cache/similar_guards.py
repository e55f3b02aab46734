"""Guards for similar-question hits: pure checks that refuse a lexically close candidate whose
meaning may differ.

Lexical similarity cannot see that "turn on dark mode" and "turn off dark mode", "5 km" and
"5 miles", `--max-cost` and `--max-heads`, or "dog bites man" and "man bites dog" want different
answers (embedding caches score such pairs above 0.9 too). So a candidate only becomes a hit when
every guard below finds nothing that differs; each guard names the failure it exists for, which
is what the benchmark's hard negatives test. Precision first: a refused paraphrase costs one
generation, a wrong hit costs a wrong answer.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_CJK}]|[a-z0-9_]+(?:'[a-z]+)?")
_CLAUSE = re.compile(r"[,;:.!?，。；：！？、\n]+")
_CN_DIGITS = {
    "零": 0,
    "〇": 0,
    "一": 1,
    "二": 2,
    "两": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}
_CN_UNITS = {"十": 10, "百": 100, "千": 1000, "万": 10_000, "亿": 100_000_000}
_CN_NUMBER = re.compile(r"[零〇一二两三四五六七八九十百千万亿]+")
_CN_NOT_NUMBERS = ("一下", "一些", "一样", "一起", "统一", "唯一", "一般", "一直", "一定", "一点", "万一", "一旦")
_CN_NUMBER_OR_WORD = re.compile("|".join(_CN_NOT_NUMBERS) + "|" + _CN_NUMBER.pattern)
_NUMBER = re.compile(r"(?<![a-z_])(\d+(?:[.,]\d+)*)\s*(%|[a-z]{1,5}\b|[\u4e00-\u9fff])?", re.I)
UNITS = frozenset(
    "mm cm m km inch inches in ft foot feet mile miles yard yards mg g kg lb lbs pound pounds ounce oz ton tons "
    "ml l liter liters litre gallon gallons b kb mb gb tb kib mib gib byte bytes bit bits ms s sec second seconds "
    "min minute minutes h hr hour hours day days week weeks month months year years usd eur rmb cny dollar dollars "
    "euro euros yuan celsius fahrenheit kelvin hz khz mhz ghz w kw v a px pt em rem percent".split()
)
_NOT_UNITS = frozenset(("in", "em", "pt", "min", "am", "be"))  # words before they are units, unless after a number
ZH_UNITS = (
    "毫米",
    "厘米",
    "公里",
    "千米",
    "米",
    "英里",
    "英尺",
    "英寸",
    "克",
    "千克",
    "公斤",
    "斤",
    "吨",
    "毫升",
    "升",
    "字节",
    "毫秒",
    "秒",
    "分钟",
    "小时",
    "天",
    "周",
    "星期",
    "个月",
    "月",
    "年",
    "元",
    "美元",
    "欧元",
    "人民币",
    "摄氏度",
    "华氏度",
    "度",
    "像素",
    "倍",
    "岁",
    "块",
)
NEGATIONS_EN = frozenset(
    "not no never without none nobody nothing neither nor cannot cant dont doesnt didnt isnt "
    "arent wasnt werent wont shouldnt wouldnt couldnt hasnt havent nowhere non".split()
)
NEGATIONS_ZH = ("没有", "不", "没", "别", "非", "无", "未", "勿", "莫", "否", "甭")
_POLAR_EN = (
    "on off enable disable enabled disabled increase decrease add remove before after max min maximum "
    "minimum true false yes up down open close start stop show hide include exclude allow deny accept "
    "reject encrypt decrypt upload download import export push pull ascending descending first last left "
    "right higher lower more less buy sell win lose input output read write public private inner outer "
    "upper lock unlock install uninstall connect disconnect encode decode serialize deserialize compress "
    "decompress better worse best worst largest smallest longest shortest faster slower above below over "
    "under increment decrement plus minus positive negative inside outside send receive success failure "
    "valid invalid sync async client server old new earliest latest"
)
POLAR_EN = frozenset(_POLAR_EN.split())
POLAR_ZH = (
    "打开",
    "关闭",
    "开启",
    "启用",
    "禁用",
    "增加",
    "减少",
    "添加",
    "删除",
    "之前",
    "之后",
    "以前",
    "以后",
    "最大",
    "最小",
    "最多",
    "最少",
    "真",
    "假",
    "升序",
    "降序",
    "加密",
    "解密",
    "上传",
    "下载",
    "导入",
    "导出",
    "买",
    "卖",
    "输入",
    "输出",
    "读取",
    "写入",
    "公有",
    "私有",
    "上锁",
    "解锁",
    "安装",
    "卸载",
    "连接",
    "断开",
    "编码",
    "解码",
    "压缩",
    "解压",
    "更好",
    "更差",
    "最早",
    "最晚",
    "最新",
    "最旧",
    "提高",
    "降低",
    "高于",
    "低于",
    "大于",
    "小于",
    "多于",
    "少于",
    "开",
    "关",
    "左",
    "右",
    "前",
    "后",
    "上",
    "下",
    "显示",
    "隐藏",
    "允许",
    "拒绝",
    "成功",
    "失败",
)
LANGUAGES = frozenset(
    "python java javascript typescript js ts go golang rust ruby php perl kotlin swift scala c cpp "
    "c++ c# csharp haskell lua bash shell powershell sql r matlab julia dart elixir erlang html css "
    "english chinese japanese korean french german spanish russian italian portuguese arabic "
    "mandarin cantonese".split()
)
ZH_LANGUAGES = (
    "中文",
    "英文",
    "英语",
    "汉语",
    "日语",
    "日文",
    "韩语",
    "法语",
    "德语",
    "西班牙语",
    "俄语",
    "粤语",
    "繁体",
    "简体",
)
_SYMBOL_LANGUAGES = re.compile(r"(?<![a-z0-9])(?:c\+\+|c#|f#|\.net)")
_FLAG = re.compile(r"(?<![\w-])--?[A-Za-z][\w-]*(?:=[\w./:-]+)?", re.ASCII)
_PATH = re.compile(
    r"(?:[A-Za-z]:\\|~?/|\./|\.\./)[\w./\\-]+|\b[\w-]+\.(?:py|js|ts|go|rs|java|c|h|cpp|json|yaml|yml|"
    r"toml|md|txt|csv|sh|sql|html|css|xml|ini|cfg|log|lock)\b",
    re.ASCII,
)
_IDENT = re.compile(
    r"\b(?:[a-z]+_\w+|[a-z]+[A-Z]\w*|[A-Z][a-z0-9]+[A-Z]\w*|[A-Za-z_]\w*\.[A-Za-z_]\w*(?:\.\w+)*|"
    r"\w+\(\))",
    re.ASCII,
)
_QUOTED = re.compile(r"`([^`]+)`|\"([^\"]+)\"|'([^'\s][^']*)'|“([^”]+)”|‘([^’]+)’|「([^」]+)」|『([^』]+)』")
_CONTRACTIONS = (
    ("can't", "can not"),
    ("won't", "will not"),
    ("n't", " not"),
    ("what's", "what is"),
    ("it's", "it is"),
    ("that's", "that is"),
    ("i'm", "i am"),
    ("'re", " are"),
    ("'ll", " will"),
    ("'ve", " have"),
    ("'d", " would"),
)
FILLERS = (
    frozenset(
        "a an the please pls kindly can could would will you me my i we us our do does did is are was "
        "be to of for in on at tell explain give help hey hi hello thanks thank just briefly it this "
        "that there here so and with about via by as shall may might must need want like know "
        "am have".split()
    )
    - POLAR_EN
)
ZH_FILLERS = frozenset("请帮我你能吗呢吧啊呀的了么给个是在和与及")
ZH_FILLER_WORDS = ("请问", "可以", "告诉", "解释", "说明", "看看", "一下", "你好", "麻烦")


@dataclass(slots=True, frozen=True)
class Features:
    """What the guards compare, extracted once per text."""

    numbers: tuple[tuple[str, str], ...]
    units: tuple[str, ...]
    negations: tuple[str, ...]
    polarity: tuple[str, ...]
    code: tuple[str, ...]
    named: tuple[str, ...]
    clauses: tuple[tuple[str, ...], ...]  # content tokens in order, per clause
    content: frozenset[str]


def fold(text: str) -> str:
    """The form shingles and the guards read: NFKC (full-width to half-width), case folded,
    contractions spelt out ("don't" has its "not"), whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text).replace("\u2019", "'").casefold()
    for short, long in _CONTRACTIONS:
        text = text.replace(short, long)
    for word in ZH_FILLER_WORDS:  # "请问", "解释一下": politeness
        text = text.replace(word, " ")
    text = _CN_NUMBER_OR_WORD.sub(
        lambda m: m.group(0) if m.group(0) in _CN_NOT_NUMBERS else str(_cn_value(m.group(0))), text
    )  # 十二 and 12 are one number
    return re.sub(r"\s+", " ", text).strip()


def tokens(text: str) -> list[str]:
    """Content tokens: English by words, Chinese by characters (it has no spaces to split on);
    politeness and function words left out, so "please" or "请帮我" move no answer."""
    return [t for t in _TOKEN.findall(fold(text)) if not _filler(t)]


def shingles(text: str) -> set[str]:
    """Content-token unigrams and bigrams: words for English, characters and character pairs for
    Chinese."""
    toks = tokens(text)
    return set(toks) | {f"{a} {b}" for a, b in zip(toks, toks[1:])}


def jaccard(a: set[str], b: set[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def features(text: str) -> Features:
    raw = unicodedata.normalize("NFKC", text)
    low = fold(text)
    words = _TOKEN.findall(low)
    word_set = set(words)
    numbers = [(_number(m.group(1)), (m.group(2) or "").casefold()) for m in _NUMBER.finditer(low)]
    units = [w for w in words if w in UNITS and len(w) > 1 and w not in _NOT_UNITS] + [u for u in ZH_UNITS if u in low]
    negations = [w for w in words if w in NEGATIONS_EN or w.endswith("n't")] + _zh_counts(low, NEGATIONS_ZH)
    polarity = [_stem(w) for w in words if _stem(w) in POLAR_EN] + _zh_counts(low, POLAR_ZH)
    code = (
        _FLAG.findall(raw)
        + _PATH.findall(raw)
        + _IDENT.findall(raw)
        + [next(g for g in m.groups() if g) for m in _QUOTED.finditer(raw)]
    )
    named = (
        [w for w in word_set if w in LANGUAGES] + [z for z in ZH_LANGUAGES if z in low] + _SYMBOL_LANGUAGES.findall(low)
    )
    clauses = tuple(tuple(t for t in _TOKEN.findall(c) if not _filler(t)) for c in _CLAUSE.split(low))
    return Features(
        tuple(sorted(numbers)),
        tuple(sorted(units)),
        tuple(sorted(negations)),
        tuple(sorted(set(polarity))),
        tuple(sorted(code)),
        tuple(sorted(set(named))),
        tuple(c for c in clauses if c),
        frozenset(t for c in clauses for t in c),
    )


def refusal(a: Features, b: Features) -> str | None:
    """The first guard that refuses the pair, by name; None when it may share an answer."""
    for name in ("numbers", "units", "negations", "polarity", "code", "named"):
        if getattr(a, name) != getattr(b, name):
            return name
    if not _same_order(a.clauses, b.clauses):
        return "order"
    if not (_covered(a.content, b.content) and _covered(b.content, a.content)):
        return "vocabulary"
    return None


def _stem(word: str) -> str:
    """ "increases", "disabled", "adding" read as the polarity word they inflect."""
    if word in POLAR_EN:
        return word
    for suffix in ("ing", "es", "ed", "s", "d"):
        if word.endswith(suffix) and word[: -len(suffix)] in POLAR_EN:
            return word[: -len(suffix)]
        if suffix == "ing" and word.endswith("ing") and word[:-3] + "e" in POLAR_EN:
            return word[:-3] + "e"
    return word


def _filler(token: str) -> bool:
    return token in FILLERS or (len(token) == 1 and token in ZH_FILLERS)


def _number(text: str) -> str:
    """ "1,000" and "1000" are one number; "1.5" keeps its point."""
    digits = text.replace(",", "") if re.fullmatch(r"\d{1,3}(,\d{3})+", text) else text.replace(",", ".")
    try:
        return repr(float(digits))
    except ValueError:
        return digits


def _cn_value(word: str) -> int:
    """十二 -> 12, 三百零五 -> 305, 两万 -> 20000; a bare digit string (一二三) reads digit by digit."""
    if all(c in _CN_DIGITS for c in word):
        return int("".join(str(_CN_DIGITS[c]) for c in word))
    total = section = digit = 0
    for char in word:
        if char in _CN_DIGITS:
            digit = _CN_DIGITS[char]
        elif char in ("万", "亿"):
            total += (section + digit) * _CN_UNITS[char]
            section = digit = 0
        else:
            section += (digit or 1) * _CN_UNITS[char]
            digit = 0
    return total + section + digit


def _zh_counts(text: str, words: tuple[str, ...]) -> list[str]:
    """Longest words first, each occurrence counted once (没有 is not also 没)."""
    found: list[str] = []
    for word in sorted(words, key=len, reverse=True):
        count = text.count(word)
        if count:
            found += [word] * count
            text = text.replace(word, " ")
    return found


def _same_order(a: tuple[tuple[str, ...], ...], b: tuple[tuple[str, ...], ...]) -> bool:
    """Clauses may move ("in Python, how do I..." / "how do I ..., in Python"), but the tokens a
    clause of each text shares must keep their order: "dog bites man" / "man bites dog", "from A to
    B" / "from B to A" refuse."""
    for ca in a:
        pos_a = _unique_positions(ca)
        for cb in b:
            pos_b = _unique_positions(cb)
            common = sorted((p, pos_b[t]) for t, p in pos_a.items() if t in pos_b)
            order = [q for _, q in common]
            if any(x > y for x, y in zip(order, order[1:])):
                return False
    return True


def _unique_positions(clause: tuple[str, ...]) -> dict[str, int]:
    counts = Counter(clause)
    return {t: i for i, t in enumerate(clause) if counts[t] == 1}


def _covered(a: frozenset[str], b: frozenset[str]) -> bool:
    """Every content token of `a` is in `b`, or is a typo of one there (one edit; two from eight
    letters); digits never count as typos."""
    missing = a - b
    if not missing:
        return True
    pool = b - a
    return all(any(_near(t, u) for u in pool) for t in missing)


def _near(a: str, b: str) -> bool:
    if len(a) < 4 or len(b) < 4 or any(c.isdigit() for c in a + b) or abs(len(a) - len(b)) > 2:
        return False
    return _edits(a, b, 2 if min(len(a), len(b)) >= 8 else 1)


def _edits(a: str, b: str, limit: int) -> bool:
    """Damerau-Levenshtein distance (adjacent swaps count one) at most `limit`."""
    prev2: list[int] | None = None
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        row = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (ca != cb))
            if prev2 is not None and i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                row[j] = min(row[j], prev2[j - 2] + 1)
        if min(row) > limit:
            return False
        prev2, prev = prev, row
    return prev[-1] <= limit
