"""A thread's place and language, kept in process once known (issue 39: every surface read them from Redis, and
each question wrote them again): read from Redis once, written only when something changes or the hourly
renewal of its TTL is due, never kept before it is whole. Against a Redis of the test's own (its commands are
counted)."""

from __future__ import annotations

from bench.common import server_sample
from bot.slack.outbound.thread_meta import THREAD, KnownThreads
from state import Keys, RedisStore, connect
from state.keys import Renewals
from tests.conftest import OwnRedis

PLACE = {"channel": "C1", "thread_ts": "1.1", "lang": "zh"}


async def test_a_known_thread_is_read_once_and_not_written_again(own_redis: OwnRedis) -> None:
    store = RedisStore(connect(own_redis.url), keys=Keys("p"))
    meta = KnownThreads(store.meta)
    try:
        await meta.put(THREAD, "slack:C1:1.1", PLACE)
        before = await server_sample(own_redis.url)
        for _ in range(3):
            assert await meta.get(THREAD, "slack:C1:1.1") == PLACE
            await meta.put(THREAD, "slack:C1:1.1", PLACE)  # each question's conversation: the same place
        calls = (await server_sample(own_redis.url)).since(before).calls
        assert calls["hgetall"] == 0 and calls["evalsha"] == 0, calls
        elsewhere = KnownThreads(store.meta)  # another process: reads Redis once, then keeps it
        assert await elsewhere.get(THREAD, "slack:C1:1.1") == PLACE
        meta.renewals = Renewals(every_s=0)  # an hour on: the write renews the TTL
        await store.client.expire(store.keys.meta(THREAD, "slack:C1:1.1"), 100)
        await meta.put(THREAD, "slack:C1:1.1", PLACE)
        assert await store.client.ttl(store.keys.meta(THREAD, "slack:C1:1.1")) > 100
    finally:
        await store.close()


async def test_a_thread_without_its_language_is_read_until_it_has_one(own_redis: OwnRedis) -> None:
    """The worker writes the place before the progress writes the language: a copy kept without it would say
    "no language" for an hour."""
    store = RedisStore(connect(own_redis.url), keys=Keys("p"))
    meta, other = KnownThreads(store.meta), KnownThreads(store.meta)
    try:
        await meta.put(THREAD, "slack:C2:2.2", {"channel": "C2", "thread_ts": "2.2"})
        assert await other.get(THREAD, "slack:C2:2.2") == {"channel": "C2", "thread_ts": "2.2"}
        await meta.put(THREAD, "slack:C2:2.2", {"lang": "en"})
        assert (await other.get(THREAD, "slack:C2:2.2")).get("lang") == "en"  # not kept while incomplete
        await meta.put(THREAD, "slack:C2:2.2", {"lang": "zh"})  # a change is written, and kept
        assert (await meta.get(THREAD, "slack:C2:2.2"))["lang"] == "zh"
        assert (await store.meta.get(THREAD, "slack:C2:2.2"))["lang"] == "zh"
    finally:
        await store.close()
