"""Moving a single Redis's keys from the layout before shards to the sharded one (see :mod:`state.keys`),
so an upgrade keeps every thread's transcript, every paused run and every undelivered Slack message.

What moves: thread keys and outbox hashes (renamed, keeping their TTLs) and the entries of the old
run and outbox-due indexes (into their shard's index). What stays: run records, journals, tickets and
claims of old ids (their untagged names are still where :class:`state.keys.Keys` looks for them), and the
old audit stream and stats (read beside the new ones until they expire). Safe to run from several
processes at once: every step is a no-op once done.
"""

from __future__ import annotations

import json
import logging
from typing import Any, cast

from redis.exceptions import ResponseError

from state.client import Client
from state.guard import guard, text
from state.keys import Keys, Ttls, all_shards, shard_of
from state.scripts import SENTINEL, UNSHOWN_BAND

log = logging.getLogger(__name__)
LAYOUT = "2"


async def migrate(client: Client, keys: Keys, ttls: Ttls) -> int:
    """Migrate once (a marker remembers it); returns how many keys and index entries moved."""
    marker = keys.legacy("layout")
    async with guard("checking the key layout"):
        if text(await client.get(marker)) == LAYOUT:
            return 0
        moved = await _threads(client, keys) + await _outboxes(client, keys, ttls.thread_s)
        for name in ("paused", "active"):
            moved += await _run_index(client, keys, name, ttls.thread_s)
        await client.set(marker, LAYOUT, ex=ttls.thread_s)  # by then nothing of the old layout is left
    if moved:
        log.warning("moved %d Redis keys and index entries to the sharded key layout", moved)
    return moved


async def merge_run_indexes(client: Client, keys: Keys, ttls: Ttls) -> int:
    """Each shard's ``active`` and ``unshown`` indexes (builds before 2026-12-06) into its one ``runs`` index (see
    :mod:`state.scripts`), a run written since left as it is. Once done, one pipelined read at each start."""
    olds = [(shard, keys.index(shard, name), band) for shard in all_shards()
            for name, band in (("active", 0.0), ("unshown", UNSHOWN_BAND))]
    moved = 0
    async with guard("merging the run indexes"):
        pipe = client.pipeline(transaction=False)
        for _, old, _ in olds:
            pipe.zrange(old, 0, -1, withscores=True)
        found = cast(list[list[tuple[Any, float]]], await pipe.execute())
        for (shard, old, band), rows in zip(olds, found, strict=True):
            if rows:
                new = keys.index(shard, "runs")
                await client.zadd(new, {SENTINEL: -1, **{str(text(m)): band + s for m, s in rows}}, nx=True)
                await client.expire(new, ttls.thread_s)
                await client.delete(old)
                moved += len(rows)
    if moved:
        log.warning("moved %d runs into the shards' runs indexes", moved)
    return moved


async def _rename(client: Client, old: str, new: str) -> int:
    try:
        return int(bool(await client.renamenx(old, new)))
    except ResponseError:  # gone already: another process moved it
        return 0


async def _threads(client: Client, keys: Keys) -> int:
    head, moved = keys.legacy("thread:"), 0
    async for raw in client.scan_iter(match=f"{head}*", count=500):
        key = str(text(raw))
        thread_id, _, part = key[len(head):].rpartition(":")  # thread ids contain ':' themselves
        new = {"transcript": keys.transcript, "run": keys.thread_run, "lease": keys.lease}.get(part)
        if thread_id and new is not None:
            moved += await _rename(client, key, new(thread_id))
    return moved


async def _outboxes(client: Client, keys: Keys, ttl_s: int) -> int:
    head, moved = keys.legacy("outbox:"), 0
    async for raw in client.scan_iter(match=f"{head}*", count=500):
        key = str(text(raw))
        moved += await _rename(client, key, keys.outbox(key[len(head):]))
    due = keys.legacy("outbox-due")
    rows = cast(list[tuple[Any, float]], await client.zrange(due, 0, -1, withscores=True))
    for member, score in rows:
        thread = str(text(member))
        await client.zadd(keys.outbox_due(shard_of(thread)), {thread: score}, nx=True)
        await client.expire(keys.outbox_due(shard_of(thread)), ttl_s)
        moved += 1
    await client.delete(due)
    return moved


async def _run_index(client: Client, keys: Keys, name: str, ttl_s: int) -> int:
    """Old index entries are run ids; each run record says which thread, hence which shard."""
    old = keys.legacy(f"index:{name}")
    rows = cast(list[tuple[Any, float]], await client.zrange(old, 0, -1, withscores=True))
    moved = 0
    for member, score in rows:
        run_id = str(text(member))
        raw = text(await client.get(keys.run(run_id)))
        thread_id = json.loads(raw[raw.find("{"):]).get("thread_id") if raw else None  # after a commit id
        if isinstance(thread_id, str):
            new = keys.index(shard_of(thread_id), name)
            await client.zadd(new, {run_id: score}, nx=True)
            await client.expire(new, ttl_s)
            moved += 1
    await client.delete(old)
    return moved
