"""An instance that dies (os._exit, as kill -9 would) while firing a due timer. Run by test_timers.py.

``claim``: it claims what is due, then dies before handing anything on.
``enqueue``: it claims, hands each follow-up on to the work queue as the firer would (its hand-on marked, the same
request id), then dies before completing it.
"""

from __future__ import annotations

import asyncio
import os
import sys

from bot.slack.followups.firing import HANDED
from bot.slack.inbound.work_items import Converse
from state import Keys, RedisStore, connect


async def main(redis_url: str, prefix: str, mode: str, now: float) -> None:
    store = RedisStore(connect(redis_url), keys=Keys(prefix))
    claimed = await store.timers.claim(now, 60.0)
    sys.stdout.write(f"CLAIMED {len(claimed)}\n")
    if mode == "enqueue":
        for one in claimed:
            timer = one.timer
            item = Converse(channel=timer.channel, thread_ts=timer.thread_ts, user=timer.owner,
                            text=f"Follow-up requested by <@{timer.owner}> at 12:00 UTC: {timer.question}",
                            request_id=timer.request_id, unattended=True, timer=timer)
            await store.meta.put(HANDED, timer.request_id, {"at": str(now)})
            await store.queue.put(item.model_dump_json())
            sys.stdout.write("ENQUEUED\n")
    sys.stdout.flush()
    os._exit(9)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])))
