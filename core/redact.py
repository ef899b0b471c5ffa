"""Redaction of secrets and personal data from text, applied wherever text leaves our hands: tool results and
everything else bound for the model or Redis (questions, the model's own replies and arguments), and every
message bound for Slack.

Patterns, not an entropy detector: an ops bot reads log lines full of ids, hashes and base64 that an
entropy check flags, and precision on ordinary lines matters as much as recall. The classes follow
detect-secrets' plugin set (keyword assignments, AWS, GitHub, GitLab, Slack, Stripe, JWT, private keys,
basic auth) plus Google, Azure, OpenAI/Anthropic keys, credentials in URLs, e-mail and phone numbers.
Each match is replaced by ``[REDACTED <kind>]`` (or its value part only, so the line still reads).
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Callable
from typing import Any

Replacement = str | Callable[[re.Match[str]], str]

# A name that says "this value is a secret", in any case and with any of _ - . or space between its words.
_SEP = r"[\s_.-]?"
_SECRET_WORD = (rf"(?:secret|passw(?:or)?d|pwd|pass{_SEP}phrase|token|api{_SEP}key|"
                rf"access{_SEP}key|private{_SEP}key|account{_SEP}key|shared{_SEP}access{_SEP}key|client{_SEP}key|"
                rf"credentials?|auth{_SEP}key|session{_SEP}key|signing{_SEP}key|encryption{_SEP}key)"
                r"(?:[_.-][A-Za-z0-9]+)*")
_SECRET_NAME = rf"(?:[A-Za-z0-9]+[_.-])*{_SECRET_WORD}"
# Searching text, a match starts at the secret word itself: a leading ``(?:word[_.-])*`` there would be retried
# from every position of a line full of dashed names (k8s pods, ids): quadratic, seconds for 8 KB of log.
_WORD_START = r"(?<![A-Za-z0-9])"
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def _full_name(match: re.Match[str]) -> str:
    """The whole name a secret word ends (``db_password``), found backwards from the match."""
    start, text = match.start(), match.string
    while start > 0 and text[start - 1] in _NAME_CHARS:
        start -= 1
    return text[start:match.start()] + match.group("name")
# Values that are ordinary, not secrets, even after such a name ("token: expired", "token_ttl=3600").
_PLACEHOLDER = re.compile(r"(?i)^(?:true|false|null|none|nil|yes|no|empty|expired|invalid|missing|required|"
                          r"set|unset|\*+|x+|redacted|\[redacted.*|<.*>|\$\{.*\}|%s|\{\})$")
_NUMBER = re.compile(r"^(?:\d{1,8}|\d+(?:\.\d+)?(?:ms|s|m|h|d)?)$")
_PASSWORD_LIKE = re.compile(r"(?i)pass|pwd|secret|private")


def _assignment(match: re.Match[str]) -> str:
    value = match.group("value")
    if _PLACEHOLDER.match(value) or (_NUMBER.match(value) and not _PASSWORD_LIKE.search(_full_name(match))):
        return match.group(0)
    return f"{match.group('lead')}[REDACTED]"


def _spoken(match: re.Match[str]) -> str:
    """"the password is hunter2hunter2": only a value that looks made up (a digit or a symbol in it)."""
    value = match.group("value")
    if _PLACEHOLDER.match(value) or not re.search(r"[\d\W_]", value):
        return match.group(0)
    return f"{match.group('lead')}[REDACTED]"


def _bare_aws_secret(match: re.Match[str]) -> str:
    """40 base64 characters with upper case, lower case and a digit: not a hex digest, not a word, and not the
    path of a link (``https://x.slack.com/archives/C0ALERTS/p1796394142553475``: a permalink, kept whole)."""
    value = match.group(0)
    if not (re.search(r"[A-Z]", value) and re.search(r"[a-z]", value) and re.search(r"\d", value)):
        return value
    before = match.string[max(0, match.start() - 2048):match.start()]
    token = before.rsplit(None, 1)[-1] if before and not before[-1].isspace() else ""  # the word it is part of
    return value if "/" in value and "://" in token else "[REDACTED aws secret]"


class _Views:
    """Cheap views of a text, each made once and only when a gate asks: a pattern whose gate says no cannot match,
    so it does not run (issue 39: the patterns without a literal of their own cost ~5 ms on 20 KB of log)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._folded: str | None = None
        self._maps: dict[bytes, bytes] = {}

    @property
    def folded(self) -> str:
        """The text as ``(?i)`` sees it: casefolded, and "ı" and "İ" (which ``(?i)`` takes for "i") made "i"."""
        if self._folded is None:
            folded = self.text.casefold()
            for odd, plain in _FOLD_FIXES:  # (str.translate with a mapping is ~50× slower than a replace)
                if odd in folded:
                    folded = folded.replace(odd, plain)
            self._folded = folded
        return self._folded

    def mapped(self, table: bytes) -> bytes:
        """The text's UTF-8 bytes through ``table``: a character class becomes one byte, so a run of it is a
        substring (an ASCII class only: every byte of a character beyond ASCII is 0x80 or more)."""
        if table not in self._maps:
            self._maps[table] = self.text.encode("utf-8", "surrogatepass").translate(table)
        return self._maps[table]


Gate = Callable[[_Views], bool]
_FOLD_FIXES = (("\u0131", "i"), ("\u0307", ""))  # "İ".casefold() is "i" + U+0307; "ı" stays "ı"


def _byte_classes(default: bytes, classes: dict[bytes, str]) -> bytes:
    """A ``bytes.translate`` table: each byte of a class's characters becomes the class's mark, any other byte
    ``default``."""
    table = bytearray(default * 256)
    for mark, members in classes.items():
        for byte in members.encode():
            table[byte] = mark[0]
    return bytes(table)


_BASE64 = _byte_classes(b" ", {b"a": string.ascii_letters + string.digits + "/+", b"=": "="})
_A_DIGIT = re.compile(r"\d")
# The phone pattern's core as digits (d), separators (s) and what \w or "." matches (w): a Chinese mobile number
# (11 digits, two optional separators) or the tail of a North American one (separator, 3 digits, separator,
# 4 digits). Either ends where no \w or "." follows.
_DIGITS = _byte_classes(b"x", {b"d": string.digits, b"s": " -", b"w": string.ascii_letters + "_."})
_PHONE_SHAPES = (b"ddddddddddd", b"dddsdddddddd", b"dddddddsdddd", b"dddsddddsdddd", b"sdddsdddd")
_OTHER_THAN = {mark: re.compile(b"[^" + mark + b"]") for mark in (b"a", b"d")}
_DOMAIN = re.compile(r"[A-Za-z0-9.-]+\.[A-Za-z]{2,}")


def literal(*words: str) -> Gate:
    if len(words) == 1:  # most: no generator to start for each text
        word = words[0]
        return lambda v: word in v.text
    return lambda v: any(w in v.text for w in words)


def folded(*words: str) -> Gate:
    """For a ``(?i)`` pattern: one of ``words`` (lower case) appears in any case."""
    return lambda v: any(w in v.folded for w in words)


def _run_end(mapped: bytes, mark: bytes, at: int) -> int:
    """Where the run of ``mark`` bytes that goes on at ``at`` ends."""
    other = _OTHER_THAN[mark].search(mapped, at)
    return other.start() if other else len(mapped)


def _base64_secret(v: _Views) -> bool:
    """A run of exactly 40 base64 characters, no "=" either side, with upper case, lower case and a digit: the
    only match :func:`_bare_aws_secret` changes (an ASCII text; any other is left to the pattern)."""
    if not v.text.isascii():
        return b"a" * 40 in v.mapped(_BASE64)
    mapped, at = v.mapped(_BASE64), 0
    while (at := mapped.find(b"a" * 40, at)) >= 0:
        stop = _run_end(mapped, b"a", at + 40)
        if stop - at == 40 and mapped[at - 1:at] != b"=" and mapped[stop:stop + 1] != b"=":
            run = v.text[at:stop]
            if run.lower() != run and run.upper() != run and _A_DIGIT.search(run):  # (ASCII: C-speed checks)
                return True
        at = stop
    return False


def _phone_shape(v: _Views) -> bool:
    # \d and \w match digits and letters beyond ASCII too: such a text is left to the pattern itself
    if not v.text.isascii():
        return True
    mapped = v.mapped(_DIGITS)
    for shape in _PHONE_SHAPES:
        at = 0
        while (at := mapped.find(shape, at)) >= 0:
            after = mapped[at + len(shape):at + len(shape) + 1]
            if after not in (b"d", b"w") and _run_starts_clear(mapped, at):
                return True
            if after == b"d":  # inside a longer run of digits: on to the shapes that reach the run's end
                at = max(at + 1, _run_end(mapped, b"d", at + len(shape)) - len(shape))
            else:
                at += 1
    return False


def _run_starts_clear(mapped: bytes, at: int) -> bool:
    r"""Whether the digits running back from ``at`` follow something other than a letter, "_" or "." (a match, or
    its country code, starts there: ``(?<![\w.])``); a very long run is not looked through, and passes."""
    start = at
    while start > 0 and mapped[start - 1] == 0x64 and at - start < 64:
        start -= 1
    return mapped[start - 1:start] != b"w" or at - start >= 64


def _email_domain(v: _Views) -> bool:
    """An "@" followed by a domain (a dot and two letters at least): every e-mail match has one."""
    text, at = v.text, 0
    while (at := text.find("@", at) + 1) > 0:
        if _DOMAIN.match(text, at):
            return True
    return False


_SECRET_STEMS = ("secret", "pass", "pwd", "token", "key", "credential")  # in every word of _SECRET_WORD

_PATTERNS: tuple[tuple[re.Pattern[str], Replacement, Gate], ...] = (
    (re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----.*?(-----END [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----|\Z)",
                re.S), "[REDACTED private key]", literal("PRIVATE KEY")),
    (re.compile(r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_-]+"),
     "[REDACTED slack webhook]", literal("hooks.slack.com")),
    (re.compile(r"\bxox[abposre]-[A-Za-z0-9-]{10,}"), "[REDACTED slack token]", literal("xox")),
    (re.compile(r"\bxapp-[A-Za-z0-9-]{10,}"), "[REDACTED slack token]", literal("xapp-")),
    (re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|ABIA|ACCA)[0-9A-Z]{16}\b"), "[REDACTED aws key]",
     literal("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "AIPA", "ANPA", "ANVA", "ABIA", "ACCA")),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"), "[REDACTED github token]", literal("gh")),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}"), "[REDACTED github token]", literal("github_pat_")),
    (re.compile(r"\bgl(?:pat|dt|rt|ptt|cbt|imt|agent|oas)-[A-Za-z0-9_-]{20,}"), "[REDACTED gitlab token]",
     literal("gl")),
    (re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}\b"), "[REDACTED stripe key]",
     literal("_live_", "_test_")),
    (re.compile(r"\bwhsec_[A-Za-z0-9]{24,}\b"), "[REDACTED stripe key]", literal("whsec_")),
    (re.compile(r"\bsk-ant-[A-Za-z0-9_-]{20,}"), "[REDACTED anthropic key]", literal("sk-ant-")),
    (re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"), "[REDACTED npm token]", literal("npm_")),
    # .npmrc credentials: //registry/:_authToken=…, :_auth=…, :_password=… (camelCase hides the word "token")
    (re.compile(r"(:_(?:authToken|auth|password)\s*=\s*)[^\s\"']+"), r"\1[REDACTED]",
     literal(":_auth", ":_password")),
    (re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"), "[REDACTED openai key]", literal("sk-")),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"), "[REDACTED google key]", literal("AIza")),
    (re.compile(r"\bGOCSPX-[A-Za-z0-9_-]{20,}"), "[REDACTED google secret]", literal("GOCSPX-")),
    (re.compile(r"\bya29\.[A-Za-z0-9_-]{20,}"), "[REDACTED google token]", literal("ya29.")),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), "[REDACTED jwt]", literal("eyJ")),
    # Azure connection strings and SAS URLs: the key part only (base64 with '=', '/', '+').
    (re.compile(r"(?i)((?:AccountKey|SharedAccessKey|SharedSecretValue)\s*=\s*)[^;\s\"']+"), r"\1[REDACTED]",
     folded("accountkey", "sharedaccesskey", "sharedsecretvalue")),
    (re.compile(r"(?i)([?&]sig=)[A-Za-z0-9%+/=]{16,}"), r"\1[REDACTED]", folded("sig=")),
    (re.compile(r"(?i)\b(bearer|basic|token|digest)(\s+)[A-Za-z0-9._~+/=-]{12,}"), r"\1\2[REDACTED]",
     folded("bearer", "basic", "token", "digest")),
    (re.compile(r"(\b[a-z][a-z0-9+.-]*://[^\s:/@]*:)[^\s@/]+@"), r"\1[REDACTED]@", literal("://")),  # user may be empty
    # name = value, name: value, "name": "value", name => value
    (re.compile(rf"(?i)(?P<lead>{_WORD_START}(?P<name>{_SECRET_WORD})[\"']?\s*(?:=>|[=:])\s*[\"']?)"
                r"(?P<value>[^\s\"',;}\]]{3,})"), _assignment, folded(*_SECRET_STEMS)),
    (re.compile(rf"(?i)(?P<lead>{_WORD_START}(?P<name>{_SECRET_WORD})\s+(?:is|was)\s+[\"']?)(?P<value>[^\s\"',;]{{6,}})"),
     _spoken, folded(*_SECRET_STEMS)),
    (re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"), _bare_aws_secret, _base64_secret),
    # Tried only where a run of address characters starts (not from inside one: quadratic on long ids).
    (re.compile(r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b"), "[REDACTED email]",
     _email_domain),
    # A country code needs its "+" or a separator: "17" glued to a number is an epoch timestamp, not Morocco.
    (re.compile(r"(?<![\w.])(?:\+\d{1,3}[ -]?|\d{1,3}[ -])?"
                r"(?:1[3-9]\d(?:[ -]?\d{4}){2}|\(?\d{3}\)?[ -]\d{3}[ -]\d{4})(?![\w.])"), "[REDACTED phone]",
     _phone_shape),
)


_SHORTEST_SECRET = 6
"""No pattern matches fewer characters ("a@b.io", "pwd=ab1")."""


def redact(text: str) -> str:
    if len(text) < _SHORTEST_SECRET:
        return text
    if len(text) <= 200:  # names, ids, arguments: the same few strings again and again
        return _redact_short(text)
    return _redact(text)


@functools.lru_cache(maxsize=4096)
def _redact_short(text: str) -> str:
    return _redact(text)


def _redact(text: str, *, gated: bool = True) -> str:
    """Every pattern in turn, each only where its gate says it could match (``gated=False``: every one, for the
    tests that hold the gates to that)."""
    views = _Views(text)
    for pattern, replacement, gate in _PATTERNS:
        if not gated or gate(views):
            text, changed = pattern.subn(replacement, text)
            if changed:
                views = _Views(text)  # a later pattern looks at the text as redacted so far
    return text


_NAMED_SECRET = re.compile(rf"(?i){_SECRET_NAME}|authorization|cookie")


def redact_value(value: Any) -> Any:
    """Every string inside a JSON-like value redacted (keys included); a string under a key that names a secret
    (``{"db_password": "..."}``, ``{"Authorization": "..."}``) is redacted whatever it looks like."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(str(k)): _named(str(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(v) for v in value]
    return value


def _named(key: str, value: Any) -> Any:
    if not isinstance(value, str) or not value or not _NAMED_SECRET.fullmatch(key) or _PLACEHOLDER.match(value):
        return redact_value(value)
    if _NUMBER.match(value) and not _PASSWORD_LIKE.search(key):
        return redact(value)  # token_ttl: 3600 stays; a phone number under "credentials" still goes
    return "[REDACTED]"


def redact_blocks(value: Any) -> Any:
    """Block Kit with every ``text`` redacted, and nothing else: ids and button values must stay intact."""
    if isinstance(value, dict):
        return {k: redact(v) if k == "text" and isinstance(v, str) else redact_blocks(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_blocks(v) for v in value]
    return value
