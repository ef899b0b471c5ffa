"""Stopping a loop: a cancel the task swallowed (on Python 3.11 one that lands as an inner wait ends, as a Redis
reply does) is sent again, so a stop never waits for good (a test run once stood still in a worker's stop)."""

from __future__ import annotations

import asyncio

from bot.agent.periodic import cancelled


async def test_a_task_that_swallowed_a_cancel_is_cancelled_again() -> None:
    swallowed: list[int] = []

    async def stubborn() -> None:
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed.append(1)  # lost on the way, as in the library

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    await asyncio.wait_for(cancelled(task), 10)  # cancelled once and awaited, it would wait for good
    assert task.cancelled() and swallowed == [1]
    await cancelled(task)  # an ended task: nothing to do
