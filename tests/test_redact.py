"""Redaction over a corpus: every real-shaped secret goes, wherever it sits; ordinary log lines stay as they were.
And escaping: text we did not write can neither mention nor disguise a link."""

from __future__ import annotations

import json
import random

import pytest

from bot.slack.outbound.blocks import escape
from core.redact import _redact, redact, redact_blocks, redact_value
from tests.redaction_corpus import SECRETS, ordinary_lines

# Agreed over-scrub rate on ordinary lines: at most 1 in 100 lines changed at all.
MAX_OVER_SCRUB = 0.01


def test_the_corpus_is_big_enough_to_mean_something() -> None:
    assert len(SECRETS) >= 40 and len({s for _, s in SECRETS}) == len(SECRETS)


@pytest.mark.parametrize(("line", "secret"), SECRETS, ids=[s[:14] for _, s in SECRETS])
def test_a_secret_in_a_log_line_is_redacted(line: str, secret: str) -> None:
    out = redact(line.format(s=secret))
    assert secret not in out and "[REDACTED" in out


def test_secrets_in_a_runbook_are_redacted_and_the_prose_stays() -> None:
    runbook = "# Payments: database timeouts\n\n" + "\n".join(
        f"{i}. If the pool is exhausted, check this: {line.format(s=secret)}" for i, (line, secret) in
        enumerate(SECRETS, 1)) + "\n\nRoll back first; restart only if the pool does not recover."
    out = redact(runbook)
    assert not [secret for _, secret in SECRETS if secret in out]
    assert out.startswith("# Payments: database timeouts") and out.endswith("restart only if the pool does not "
                                                                               "recover.")
    assert out.count("If the pool is exhausted, check this:") == len(SECRETS)


def test_secrets_in_tool_arguments_and_nested_results_are_redacted() -> None:
    names = ["password", "DB_PASSWORD", "api_key", "apiKey", "client-secret", "Authorization", "X-Auth-Token",
             "private_key", "credentials", "aws.secret.access.key", "cookie"]
    args = {"query": [line.format(s=secret) for line, secret in SECRETS[::2]],
            "env": [{names[i % len(names)]: secret} for i, (_, secret) in enumerate(SECRETS[1::2])],
            "log": {"lines": [line.format(s=secret) for line, secret in SECRETS[1::2]]}}
    out = json.dumps(redact_value(args))
    assert not [secret for _, secret in SECRETS if secret in out]
    # A value is judged by its name only when the name says "secret"; other fields keep theirs.
    assert redact_value({"service_id": "payments", "token_ttl": "3600", "password": ""}) == {
        "service_id": "payments", "token_ttl": "3600", "password": ""}


def test_block_kit_texts_are_redacted_but_ids_and_button_values_are_not() -> None:
    secret = SECRETS[0][1]
    blocks = [{"type": "section", "block_id": "b1", "text": {"type": "mrkdwn", "text": f"key {secret}"}},
              {"type": "actions", "elements": [{"type": "button", "action_id": "opspilot_confirm",
                                                "value": "s3.token_value_with_token=abc12345"}]}]
    out = redact_blocks(blocks)
    assert secret not in json.dumps(out)
    assert out[1] == blocks[1] and out[0]["block_id"] == "b1"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_ordinary_log_lines_are_left_alone(seed: int) -> None:
    lines = ordinary_lines(250, seed=seed)
    changed = [line for line in lines if redact(line) != line]
    assert len(changed) / len(lines) <= MAX_OVER_SCRUB, changed[:5]


@pytest.mark.parametrize("text", [
    "token: expired", "password reset requested", "token_ttl=3600", "secret rotation done", "api_key_id=42",
    "max_tokens=4096", "the token is invalid", "sha 3f786850e387550fdab836ed7e6dc881de23001b",
    "s3://bucket/key.csv", "GET /v1/users/1234/orders?page=2", "10.0.3.7:9090", "pod payments-7d9f8b6c5-x2x7k",
    # a permalink's path is 40 base64-looking characters: it stays a working link (it broke incident summaries)
    "(https://acme.slack.com/archives/C024BE91L/p1796394142553475?thread_ts=1796394142.553475&cid=C024BE91L)",
])
def test_words_that_sound_secret_but_are_not(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize("hostile", [
    "<!channel> pay attention", "<!here>", "<!everyone>", "<!subteam^S0123ABCD|@sre>", "<@U0ALICE>",
    "<#C0GENERAL>", "<https://evil.example/login|click to re-auth>", "<mailto:a@b.c|support>",
])
def test_escaped_text_can_neither_mention_nor_hide_a_link(hostile: str) -> None:
    out = escape(hostile)
    assert "<" not in out and ">" not in out
    assert escape("a & b <c>") == "a &amp; b &lt;c&gt;"
    if "https://evil.example/login" in hostile:
        assert "https://evil.example/login" in out  # the real target stays visible


# What the gates (a pattern runs only where it could match) are held to: the same output as every pattern run on
# every text. Texts built to sit on the gates' edges: digit runs with separators (phone numbers), runs of base64
# around 40 characters, secret words in every case and in the Unicode letters ``(?i)`` takes for ASCII ones.
_WORDS = ["secret", "PASS", "pwd", "Token", "KEY", "credential", "paſſword", "tokenſ", "\u0131", "\u0130", "\u212a",
          "api_key", "Api-Key", "passphrase", "AccountKey=", "SharedAccessKey =", "SharedSecretValue=", "?sig=",
          "&SIG=", "bearer ", "Basic ",
          "digest ", "credent\u0131al", "CREDENT\u0130AL", "?s\u0131g=", "&S\u0130G=", "d\u0131gest ", "bas\u0130c ",
          "AKIA", "ASIA", "is ", " was ", "=", ": ", "\"", "@", "中文", "\u0307", "\ud800"]


def _edge_text(rng: random.Random) -> str:
    kind = rng.randrange(5)
    if kind == 0:  # phone-shaped: Chinese and North American numbers, and digits anyhow, in any surroundings
        digits = lambda n: "".join(rng.choice("0123456789") for _ in range(n))  # noqa: E731
        sep = lambda: rng.choice(["", " ", "-"])  # noqa: E731
        number = rng.choice([
            f"1{rng.choice('3456789')}{digits(1)}{sep()}{digits(4)}{sep()}{digits(4)}",
            f"{rng.choice(['', '('])}{digits(3)}{rng.choice(['', ')'])}{rng.choice(' -')}{digits(3)}"
            f"{rng.choice(' -')}{digits(4)}",
            "".join(rng.choice("0123456789" * 4 + " -()+._a,") for _ in range(rng.randint(8, 24)))])
        return (rng.choice(["", " ", "+86 ", "+86", "+1-", "+1", "0086", "a", ".", "1 ", "tel:"]) + number
                + rng.choice(["", " ", "a", ".", "5", ",", "_", "\n"]))
    if kind == 1:  # base64 runs near 40: mixed case, hex, upper case, digits only
        chars = rng.choice(["ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/+", "0123456789abcdef",
                            "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", "0123456789/+", "abcXYZ/+"])
        run = "".join(rng.choice(chars) for _ in range(rng.randint(36, 44)))
        return rng.choice(["", " ", "=", "x", "中", "https://a.io/"]) + run + rng.choice(["", " ", "=", "/", "é", "1"])
    if kind == 4:  # e-mail-shaped and not quite
        parts = ["a", "oncall.alice", "@", "@", "example", ".", "com", "c", "io", "-", "3f78", " ", "sha256:", "x"]
        return "".join(rng.choice(parts) for _ in range(rng.randint(2, 10)))
    if kind == 2:  # secret words and values
        return "".join(rng.choice([*_WORDS, "hunter2hunter2", "Zx9!kq2#Lm", "4f9c2a7e1b8d3f6a", " "])
                       for _ in range(rng.randint(1, 8)))
    line, secret = rng.choice(SECRETS)  # a corpus line, some letters upper-cased, something spliced in
    text = "".join(c.upper() if rng.random() < 0.2 else c for c in line.format(s=secret))
    at = rng.randrange(len(text) + 1)
    return text[:at] + rng.choice(_WORDS) + text[at:]


@pytest.mark.parametrize("seed", [1, 2])
def test_a_pattern_is_skipped_only_where_it_cannot_match(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(6000):
        text = _edge_text(rng)
        assert _redact(text) == _redact(text, gated=False), text


def test_a_long_log_is_redacted_as_every_pattern_would() -> None:
    log = "\n".join(ordinary_lines(150, seed=4))
    assert len(log) > 10_000
    assert _redact(log) == _redact(log, gated=False)
