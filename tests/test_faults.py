"""Every post exactly once while Slack's answers are lost or mixed faults hit (a 5xx, a 429, a reset
connection, no answer in time, the answer lost after Slack did the work): each progress message and each
answer is found again by its outbox key in `metadata` before any repost, and all of them arrive."""

from __future__ import annotations

from collections import Counter

import pytest

from bot.demo.sender import mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text
from tests.slack_harness import CHANNEL, open_workspace
from tests.test_slack import QUESTION

ANSWER = "docs/payments-db-timeouts.md"
POSTING = ("chat.postMessage", "chat.update", "chat.delete", "conversations.replies", "chat.startStream",
           "chat.appendStream", "chat.stopStream")


def keys(slack: FakeSlack) -> Counter[str]:
    return Counter(str(((m.get("metadata") or {}).get("event_payload") or {}).get("key"))
                   for m in slack.messages.values() if m.get("bot") and m.get("metadata"))


@pytest.mark.parametrize("progress", ["update", "auto"])
@pytest.mark.parametrize(("kind", "rate", "for_s", "runs"), [("lost", 1.0, 12.0, 5), ("mixed", 0.4, 15.0, 20)])
async def test_every_post_exactly_once_under_lost_answers_and_mixed_faults(
        redis_url: str, prefix: str, slack: FakeSlack, kind: str, rate: float, for_s: float, runs: int,
        progress: str) -> None:
    ws = await open_workspace(redis_url, prefix, slack, request_timeout_s=1.0, outbox_max_backoff_s=2.0,
                              progress=progress)
    try:
        slack.fault(kind, *POSTING, for_s=for_s, rate=rate, hang_s=1.5)
        threads = [f"90{n:02d}.1" for n in range(runs)]
        for thread in threads:
            await ws.sender.event(mention(CHANNEL, "UREQ", QUESTION, thread))
        await ws.settle(180)
        answers = {t: sum(1 for m in slack.thread(CHANNEL, t) if m.get("bot") and ANSWER in all_text(m))
                   for t in threads}
        assert answers == dict.fromkeys(threads, 1), answers  # 0 missing, 0 twice
        twice = {k: n for k, n in keys(slack).items() if n > 1}
        assert not twice, twice  # no progress message or answer posted twice under one outbox key
    finally:
        await ws.stop()
