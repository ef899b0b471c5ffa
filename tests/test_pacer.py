"""Pacing under Slack's limits: FIFO reservations from a token bucket, per channel for posts."""

from __future__ import annotations

import asyncio
import time

from bot.slack.pacer import Pacer


def test_posts_are_spaced_per_channel_and_updates_allow_a_burst() -> None:
    pacer = Pacer(posts_per_second=2, post_burst=1, updates_per_minute=60, update_burst=3)
    posts = [pacer.delay("chat.postMessage", "C1") for _ in range(4)]
    assert posts[0] == 0 and [round(d, 1) for d in posts[1:]] == [0.5, 1.0, 1.5]
    assert pacer.delay("chat.postMessage", "C2") == 0  # another channel has its own budget
    updates = [pacer.delay("chat.update", "C1") for _ in range(5)]
    assert updates[:3] == [0, 0, 0] and [round(d, 1) for d in updates[3:]] == [1.0, 2.0]
    assert pacer.delay("chat.postEphemeral", "C1") == 0


async def test_waiting_callers_are_served_in_order_at_the_rate() -> None:
    pacer = Pacer(posts_per_second=20, post_burst=1, updates_per_minute=6000)
    done: list[float] = []

    async def post() -> None:
        await pacer.wait("chat.postMessage", "C1")
        done.append(time.monotonic())

    start = time.monotonic()
    await asyncio.gather(*(post() for _ in range(5)))
    assert done[-1] - start >= 4 / 20 - 0.01
    assert Pacer(posts_per_second=0).delay("chat.postMessage", "C1") == 0  # disabled
