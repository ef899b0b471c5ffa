"""Four guarantees, each held by a test written to fail when its one guarded line is broken (each was checked so):
a retried claim whose first try landed is still won (state/locks.py: the attempt id); the outbox shows bidi and
zero-width characters as <U+…> (bot/slack/outbound/outgoing.py ``redact``); a digits-only value under a
password-like name is redacted (core/redact.py); a long answer is never cut inside an inline code span
(core/split.py ``_safe``)."""

from __future__ import annotations

from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from slack_sdk.web.async_client import AsyncWebClient

from bot.config import SlackConfig
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.slack.inbound.access import AccessPolicy
from bot.slack.outbound.blocks import SECTION_TEXT, split_answer
from core.redact import redact
from state import RedisStore
from tests.slack_harness import CHANNEL, open_workspace


async def test_a_retried_claim_whose_first_try_landed_is_won(store: RedisStore) -> None:
    """A Confirm during a Redis blip: the claim is written, its reply lost; the retry finds its own write there
    and wins, instead of losing to itself (and the change waiting until it expires)."""
    locks = store.locks
    real = locks._claim
    calls = 0

    async def landed_then_lost(**kw: Any) -> Any:
        nonlocal calls
        calls += 1
        answer = await real(**kw)
        if calls == 1:
            raise RedisConnectionError("connection reset after the write")
        return answer

    locks._claim = landed_then_lost  # type: ignore[assignment]
    claim = await locks.claim("tok-blip", "UAPPROVER")
    assert calls == 2 and claim.won and claim.holder == "UAPPROVER"
    locks._claim = real
    other = await locks.claim("tok-blip", "USOMEONE")
    assert not other.won and other.holder == "UAPPROVER"  # and a second person still loses to it


async def test_the_outbox_shows_hidden_characters_in_a_refusal(redis_url: str, prefix: str,
                                                               slack: FakeSlack) -> None:
    """The no_env refusal quotes the environment the card holds: through the outbox, a right-to-left override or
    a zero-width space in it is shown as <U+…>, never passed to Slack to rearrange what the person reads."""
    ws = await open_workspace(redis_url, prefix, slack)
    try:
        access = AccessPolicy(SlackConfig(bot_token="xoxb-x", signing_secret="s"), AsyncWebClient(token="x"),
                              environments=["prod", "staging"])
        verdict = await access.may_confirm("UREQ", "restart_service", "prod\u202egnigats\u200b", "UREQ")
        assert not verdict.allowed and "\u202e" in verdict.words("en")  # the raw value, up to the choke point
        await ws.service.outbox.tell(CHANNEL, "UREQ", verdict.words("en"), "900.1")
        await ws.settle()
        [said] = ws.slack.ephemeral_texts("UREQ")
        assert "prod&lt;U+202E&gt;gnigats&lt;U+200B&gt;" in said, said
        assert "\u202e" not in said and "\u200b" not in said
    finally:
        await ws.stop()


def test_a_digits_only_password_is_redacted() -> None:
    for text in ("password=12345678", "db_password: 12345678", "DB_PASSWORD=20240101", "pwd=123456"):
        out = redact(text)
        assert out.endswith("[REDACTED]") and not any(c.isdigit() for c in out.split("=")[-1].split(":")[-1]), \
            (text, out)
    assert redact("timeout=12345678") == "timeout=12345678"  # a number under an ordinary name stays


def test_a_long_answer_is_never_cut_inside_inline_code() -> None:
    """Slack would show a cut span's halves as stray backticks and the rest as code: every part keeps its spans
    whole, wherever the limit falls (a span with spaces, in one long line with no sentence to cut at)."""
    span = "`kubectl -n prod rollout restart deployment/payments --selector app=payments tier=api`"
    for lead in range(SECTION_TEXT - len(span), SECTION_TEXT + 1, 7):
        text = "w " * (lead // 2) + span + " and then" + " more words" * 40
        parts = [b["text"]["text"] for message in split_answer(text) for b in message]
        assert len(parts) > 1
        for part in parts:
            assert part.count("`") % 2 == 0, (lead, part[-120:])
        assert span in "".join(parts)
