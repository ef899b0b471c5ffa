"""What the scripted demo model understood from a question, before any tool runs: whether it asks for a change
(only an imperative does: "restart payments", "重启订单服务", "roll back orders"), or asks *about* changes,
restarts, rollbacks or a moment in time, where, and over how long. A question about a restart is never a request
for one."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from tools.ops.toolbox import WINDOWS

Change = Literal["restart", "rollback", "scale"]
Topic = Literal["changes", "restarts", "rollback", "time"]

_PROD = re.compile(r"\bprod\b|production|生产|线上|正式环境", re.I)
_STAGING = re.compile(r"staging|预发|测试环境|\bstage\b", re.I)
# A request starts with its verb, after at most a polite opener ("please", "can you", "帮我", "请"); a Chinese
# one has its verb anywhere but is not a question (吗, 几次, 有没有, 是否, 了没…).
_OPENER = r"(?:(?:please|pls|ok|okay|now|then|so|go ahead and|can you|could you|would you|let'?s|we need to)\s+)*"
_IMPERATIVE_EN = {
    "restart": re.compile(rf"^{_OPENER}(?:restart|bounce|reboot)\b", re.I),
    "rollback": re.compile(rf"^{_OPENER}(?:roll\s*back|rollback|revert|undo)\b", re.I),
    "scale": re.compile(rf"^{_OPENER}(?:scale|add replicas|add pods)\b", re.I),
}
_IMPERATIVE_ZH = {"restart": re.compile(r"重启"), "rollback": re.compile(r"回滚|回退"),
                  "scale": re.compile(r"扩容|缩容|扩到|缩到|加副本|加实例")}
# Not doing it: "不用重启了", "别回滚", "不要扩容", "算了" (never mind) — no request, whatever verb follows.
_ZH_NOT = re.compile(r"不用|不要|(?:^|[，,。；;\s])别|无需|不必|算了|先不|暂不|取消")
_ZH_QUESTION = re.compile(r"[吗呢？?]|几次|多少|有没有|是否|了没|没有|是不是|什么时候|哪次|为什么|有用|效果|帮助")
_ROLLBACK_Q = re.compile(r"roll(?:ed|ing)?\s*back|rollbacks?|revert(?:ed)?|回滚|回退", re.I)
_RESTARTS_Q = re.compile(r"restart(?:s|ed|ing)?|bounced|reboot(?:s|ed)?|重启", re.I)
_CHANGES_Q = re.compile(r"deploy(?:s|ed|ment)?|releases?d?|roll ?outs?|chang(?:e|es|ed)\b|ship(?:ped)?|"
                        r"发布|发版|上线|部署|变更|改动|改了什么|更新", re.I)
_CAUSE_Q = re.compile(r"caus|because|\bbreak|broke|why|after|since|导致|引起|造成|因为|为什么|之后|以后|后", re.I)
_TIME = re.compile(r"(?<![\d:])([01]?\d|2[0-3])[:：]([0-5]\d)(?![\d:])"
                   r"(?:\s*([aApP])\.?[mM]\.?(?![a-zA-Z]))?")  # 9:11 pm
# A zone right after the time ("17:11 UTC+8", "(UTC+8)", "PST") or right before it ("UTC+8 17:11").
_OFFSET = r"(?:UTC|GMT|utc|gmt)\s*([+-])\s*(\d{1,2})(?::?([0-5]\d))?"
_AFTER = re.compile(r"\A\s*\(?\s*(?:" + _OFFSET + r"|(UTC|GMT|utc|gmt|Z)(?![a-zA-Z])|([A-Za-z]{2,5})\b)")
_BEFORE = re.compile(_OFFSET + r"\s*\)?\s*\Z")
_ISO = re.compile(r"T([01]\d|2[0-3]):([0-5]\d)(?::\d\d(?:\.\d+)?)?(Z|[+-]\d\d:?\d\d)(?![\d:])")
_ZONES = {"pst": -8.0, "pdt": -7.0, "mst": -7.0, "mdt": -6.0, "est": -5.0, "edt": -4.0, "cet": 1.0, "cest": 2.0,
          "eet": 2.0, "eest": 3.0, "jst": 9.0, "kst": 9.0, "sgt": 8.0, "hkt": 8.0, "msk": 3.0, "wib": 7.0,
          "aest": 10.0, "aedt": 11.0, "nzst": 12.0, "nzdt": 13.0}
"""Zone abbreviations with one meaning."""
_AMBIGUOUS = frozenset({"cst", "cdt", "ist", "bst", "ast", "adt", "gst", "sst", "pt", "et", "ct", "mt", "hst"})
"""Zone abbreviations with more than one meaning (CST: China's or the US's?): asked about, never assumed UTC."""
_ZH_EIGHT = re.compile(r"北京时间|中国时间|东八区")
_ZH_PM = re.compile(r"(?:下午|晚上|傍晚)\s*$")

_ONES = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
_TEENS = ["ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_EN_NUMBERS: dict[str, float] = {
    "a": 1, "an": 1, "half an": 0.5, "half a": 0.5, **{w: i + 1 for i, w in enumerate(_ONES)},
    **{w: i + 10 for i, w in enumerate(_TEENS)}, **{w: 10 * (i + 2) for i, w in enumerate(_TENS)},
    **{f"{t}{sep}{o}": 10 * (i + 2) + j + 1 for i, t in enumerate(_TENS) for j, o in enumerate(_ONES) for sep in "- "}}
_LAST = re.compile(r"(?:last|past|previous)\s+(?:(\d+|" + "|".join(sorted(_EN_NUMBERS, key=len, reverse=True)) +
                   r")\s*)?(minute|min|hour|day|week)s?|"
                   r"最近\s*(\d+|[一二两三四五六七八九十半]+)?\s*(?:个)?\s*(半)?\s*(分钟|小时|天|周|星期)", re.I)
_RELEASE = re.compile(r"(?:to|到)\s*(?:release|version|版本)?\s*`?(\d[\w.:-]*\d|[a-z][\w-]*:[\w.-]+)`?", re.I)
_REVISION = re.compile(r"revision\s*(\d+)|第\s*(\d+)\s*(?:个)?版", re.I)
# A count to scale to says "to" (到, 至, 为, 成); one without ("扩容 2 个副本", "加 2 个实例", "up by 2") is an amount
# to add or remove, never the total: the current count is not known here, so the total is asked for.
_REPLICAS = re.compile(r"(?:\bto|到|至|为|成)\s*(\d+)\s*(?:replicas?|pods?|instances?)?", re.I)
_REPLICAS_BY = re.compile(r"\b(?:by|add|remove)\s+\d+(?:\s*(?:replicas?|pods?|instances?)\b)?|"
                          r"(?:扩容|缩容|增加|减少|加|减|多|少)?\s*\d+\s*个?\s*(?:副本|实例)", re.I)
_TODAY = re.compile(r"\btoday\b|今天|今日", re.I)
_YESTERDAY = re.compile(r"\byesterday\b|昨天|昨日", re.I)
_ZH_NUMBERS = {"一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10,
               "半": 0.5}


@dataclass(frozen=True)
class Ask:
    """What a question asks, as far as words tell: ``change`` only for an imperative request; ``topics`` for
    what it asks about; ``environment``, ``at`` (HH:MM, UTC) and ``minutes`` when it says them."""

    change: Change | None = None
    topics: frozenset[Topic] = frozenset()
    environment: str | None = None
    at: str | None = None
    minutes: int | None = None
    said_at: str = ""
    """The time as it was said, when that was not UTC ("17:11 UTC+8", "9:11 pm"): ``at`` is it in UTC."""
    offset_min: int = 0
    """The zone it was said in, in minutes east of UTC: "today at 01:00 UTC+8" is the asker's today."""
    zone_unknown: str = ""
    """A zone word the time came with that has no one meaning here ("CST"): asked about, never assumed UTC."""
    today: bool = False
    yesterday: bool = False
    cause: bool = False
    release: str | None = None
    """A rollback's target as named: "to release 2026.12.01-4", "回滚到 2026.12.01-4"."""
    revision: int | None = None
    replicas: int | None = None
    replicas_by: str = ""
    """An amount to scale by, as said ("扩容 2 个副本", "by 2"), when no count to scale to was said."""

    @property
    def about_changes(self) -> bool:
        """It needs the change history: deploys, rollbacks, restarts or "what changed"."""
        return bool(self.topics & {"changes", "restarts", "rollback"}) or (self.at is not None)


def environment(text: str) -> str | None:
    return "prod" if _PROD.search(text) else "staging" if _STAGING.search(text) else None


def request_words(text: str) -> str:
    """A request without who asked and which button they pressed: a button's request ("<@U1> pressed "Roll back to
    …": roll back orders …", "<@U1> 按下了「回滚到 …」：把 …") is the person's own words."""
    return re.sub(r"^(?:<@\w+>\s*|@\w+\s*)+(?:pressed \"[^\"]*\":\s*|按下了「[^」]*」[：:]\s*)?", "", text.strip())


def _change(text: str) -> Change | None:
    plain = request_words(text)
    for kind, pattern in _IMPERATIVE_EN.items():
        if pattern.search(plain):
            return kind  # type: ignore[return-value]
    if re.search(r"[\u3400-\u9fff]", plain) and not _ZH_QUESTION.search(plain) and not _ZH_NOT.search(plain):
        for kind, pattern in _IMPERATIVE_ZH.items():
            if pattern.search(plain):
                return kind  # type: ignore[return-value]
    return None


def _minutes(text: str) -> int | None:
    found = _LAST.search(text)
    if not found:
        return None
    count_en, unit_en, count_zh, half, unit_zh = found.groups()
    said = (count_en or count_zh or "").lower()  # "last hour" / 最近一小时 say no number, or a word for one
    count = (float(said) if said.isdigit() else _EN_NUMBERS.get(said) or _zh_number(said) or 1) + (0.5 if half else 0)
    unit = (unit_en or unit_zh or "").lower()
    per = 1 if unit in ("minute", "min", "分钟") else 60 if unit in ("hour", "小时") else \
        7 * 24 * 60 if unit in ("week", "周", "星期") else 24 * 60
    return max(5, int(count * per))


def _zh_number(said: str) -> float | None:
    """一 … 九十九 and 半 (十五 is 15, 二十 is 20); None when it is not one."""
    if said in _ZH_NUMBERS:
        return _ZH_NUMBERS[said]
    tens, ten, ones = said.partition("十")
    if not ten or any(part and part not in _ZH_NUMBERS for part in (tens, ones)):
        return None
    return (_ZH_NUMBERS[tens] if tens else 1) * 10 + (_ZH_NUMBERS[ones] if ones else 0)


def window(tool: str, minutes: int) -> int:
    """``minutes`` within what ``tool`` may read (a question's "last 3 days" is 24 h of logs: the answer says so)."""
    least, most = WINDOWS.get(tool, (minutes, minutes))
    return min(max(minutes, least), most)


def window_note(tools: list[str], minutes: int | None, zh: bool) -> str:
    """What a read could not cover of the window asked about, or ""."""
    short = [(t, WINDOWS[t][1]) for t in dict.fromkeys(tools) if t in WINDOWS and minutes and minutes > WINDOWS[t][1]]
    if not short:
        return ""

    def hours(m: int) -> str:
        days, unit = (m // 1440, "天" if zh else "days") if m >= 2880 else (m // 60, "小时" if zh else "h")
        return f"{days} {unit}"

    said = "；".join(f"`{t}` 最多 {hours(m)}" for t, m in short) if zh else \
        "; ".join(f"`{t}` at most {hours(m)}" for t, m in short)
    return f"_你问的时间范围超出了部分工具能查的范围，实际读取：{said}。_" if zh else \
        f"_The window asked about is longer than some reads may look back: {said}._"


def read(text: str) -> Ask:
    topics: set[Topic] = set()
    change = _change(text)
    if change is None:  # what the question is about, when it is not a request
        if _ROLLBACK_Q.search(text):
            topics.add("rollback")
        if _RESTARTS_Q.search(text):
            topics.add("restarts")
        if _CHANGES_Q.search(text):
            topics.add("changes")
    at, said, offset_min, unknown = _clock(text)
    if at:
        topics.add("time")
    release = _RELEASE.search(text) if change == "rollback" else None
    revision = _REVISION.search(text) if change == "rollback" else None
    replicas = _REPLICAS.search(text) if change == "scale" else None
    by = _REPLICAS_BY.search(text) if change == "scale" and not replicas else None
    return Ask(change=change, topics=frozenset(topics), environment=environment(text),
               release=release.group(1) if release else None,
               revision=int(revision.group(1) or revision.group(2)) if revision else None,
               replicas=int(replicas.group(1)) if replicas else None, replicas_by=by.group(0).strip() if by else "",
               at=at, said_at=said, offset_min=offset_min, zone_unknown=unknown, minutes=_minutes(text),
               today=bool(_TODAY.search(text)), yesterday=bool(_YESTERDAY.search(text)),
               cause=bool(_CAUSE_Q.search(text)))


def _clock(text: str) -> tuple[str | None, str, int, str]:
    """The time a question names, in UTC (HH:MM); as said when it was not UTC; its zone's offset in minutes; a zone
    word it came with that cannot be read one way."""
    if iso := _ISO.search(text):  # 2026-12-02T17:11+08:00
        zone = iso.group(3)
        offset = 0 if zone == "Z" else (1 if zone[0] == "+" else -1) * (int(zone[1:3]) * 60 + int(zone[-2:]))
        return _utc(int(iso.group(1)) * 60 + int(iso.group(2)), offset), (iso.group(0) if offset else ""), offset, ""
    found = _TIME.search(text)
    if found is None:
        return None, "", 0, ""
    hours, minutes, half = int(found.group(1)), int(found.group(2)), found.group(3)
    said = found.group(0).strip()
    if half and 1 <= hours <= 12:
        hours = hours % 12 + (12 if half.lower() == "p" else 0)
    elif _ZH_PM.search(text[:found.start()]) and hours < 12:  # 下午 5:11
        hours += 12
        said = f"{text[:found.start()].strip()[-2:]}{said}"
    offset = 0
    after, before = _AFTER.match(text[found.end():]), _BEFORE.search(text[:found.start()])
    if after and after.group(1):
        offset = _minutes_east(after.group(1), after.group(2), after.group(3))
        said = f"{said} {after.group(0).strip().lstrip('(').strip()}"
    elif before:
        offset = _minutes_east(before.group(1), before.group(2), before.group(3))
        said = f"{before.group(0).strip().rstrip(')').strip()} {said}"
    elif after and after.group(5) and after.group(5).lower() in _ZONES:
        offset = round(_ZONES[after.group(5).lower()] * 60)
        said = f"{said} {after.group(5)}"
    elif after and after.group(5) and after.group(5).lower() in _AMBIGUOUS:
        return None, f"{said} {after.group(5)}", 0, after.group(5).upper()
    elif not (after and after.group(4)) and _ZH_EIGHT.search(text):
        offset, said = 8 * 60, f"{said}（北京时间）"
    if not offset and not (half or hours != int(found.group(1))):
        return f"{hours:02d}:{minutes:02d}", "", 0, ""
    return _utc(hours * 60 + minutes, offset), said, offset, ""


def _minutes_east(sign: str, hours: str, minutes: str | None) -> int:
    return (1 if sign == "+" else -1) * (int(hours) * 60 + int(minutes or 0))


def _utc(local_minute: int, offset: int) -> str:
    total = (local_minute - offset) % (24 * 60)
    return f"{total // 60:02d}:{total % 60:02d}"
