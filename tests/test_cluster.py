"""The sharded key layout: the whole product on a real three-master Redis Cluster, and an upgrade of a single
Redis from the layout before shards that keeps a paused run answerable."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from redis.asyncio.cluster import RedisCluster

from bot.agent.decisions import Confirm
from bot.agent.models.scripted import ScriptedModel, call, reply
from bot.agent.sweeps import Sweeps
from bot.agent.transcript import violations
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text
from core.messages import ToolResultMessage
from state import Keys, RedisStore
from state.keys import shard_of
from tests.conftest import make_harness
from tests.slack_harness import CHANNEL, ask_restart, confirm, open_workspace
from tools import ops


async def test_a_whole_slack_scenario_on_a_cluster(cluster_url: str, prefix: str, slack: FakeSlack) -> None:
    ws = await open_workspace(cluster_url, prefix, slack)
    try:
        threads = [f"{100 + i}.1" for i in range(6)]
        cards = [await ask_restart(ws, thread) for thread in threads]
        for card in cards:  # a double click on each: every restart runs once
            await asyncio.gather(ws.sender.action(confirm(card, "UA")), ws.sender.action(confirm(card, "UB")))
        await ws.settle()

        assert len(ws.toolbox.restarts.done) == len(threads)
        for thread in threads:
            final = all_text(slack.thread(CHANNEL, thread)[-1])
            assert "Restarted `payments` in prod" in final and "requested by <@UREQ>" in final
        assert slack.rejected == []

        client = ws.store.client
        assert isinstance(client, RedisCluster)
        keys = [str(k) async for k in client.scan_iter(match=f"{prefix}:*")]
        for key in keys:
            assert await client.ttl(key) > 0, f"{key} has no TTL"
        # The threads' keys live on more than one master, and each thread's keys in one slot.
        masters = {client.get_node_from_key(k).name for k in keys}
        assert len(masters) >= 2
        for thread in threads:
            thread_id = f"slack:{CHANNEL}:{thread}"
            slots = {client.keyslot(k) for k in keys if f"{{{shard_of(thread_id)}}}" in k}
            assert len(slots) == 1
    finally:
        await ws.stop()


async def test_sweeps_find_runs_in_every_shard_of_a_cluster(cluster_store: RedisStore) -> None:
    threads = [f"t{i}" for i in range(8)]
    assert len({shard_of(t) for t in threads}) >= 4
    ask = reply("restarting", call("restart_service", "r1", service_id="payments", environment="prod"))
    model = ScriptedModel([ask] * len(threads) + [reply("not restarted: nobody answered")] * len(threads))
    toolbox = ops.build()
    h = make_harness(model, cluster_store, toolbox=toolbox)
    paused = [await h.engine.ask(t, "restart payments in prod") for t in threads]
    assert {p.status for p in paused} == {"paused"}
    assert sorted(await cluster_store.runs_due("paused", float("inf"))) == sorted(p.run_id for p in paused)

    await Sweeps(h.engine).sweep(now=time.time() + 7 * 24 * 3600)

    assert await cluster_store.runs_due("paused", float("inf")) == []
    for run in paused:
        record = await cluster_store.load_run(run.run_id)
        assert record is not None and record.status == "finished" and record.stop_reason == "interrupted"
        transcript = await cluster_store.load_transcript(record.thread_id)
        results = [m for m in transcript if isinstance(m, ToolResultMessage)]
        assert violations(transcript) == [] and [r.error_code for r in results] == ["expired"]
    assert toolbox.restarts.done == []


async def test_an_upgrade_keeps_a_paused_run_answerable(store: RedisStore, prefix: str) -> None:
    """Keys written before shards: the migration moves the thread and indexes; the old run id still works."""
    toolbox = ops.build()
    model = ScriptedModel([reply("restarting", call("restart_service", "r1", service_id="payments",
                                                    environment="prod")), reply("restarted")])
    h = make_harness(model, store, toolbox=toolbox)
    scratch = await h.engine.ask("slack:C1:1.1", "restart payments in prod", user_id="UREQ")
    stored_run = str(await store.client.get(store.keys.run(scratch.run_id)))
    record = json.loads(stored_run[stored_run.index("{"):])  # behind the id of the commit that wrote it
    ticket = json.loads(await store.client.get(store.keys.token(scratch.pending[0].token)))
    transcript = await store.client.lrange(store.keys.transcript("slack:C1:1.1"), 0, -1)
    await store.client.delete(*[k async for k in store.client.scan_iter(match=f"{prefix}:*")])

    # The same paused run, as the previous release wrote it: ids without a shard, keys without a tag.
    old_run, old_token, ttl = uuid.uuid4().hex, "legacy-token-0123456789abcdef", 3600
    record["run_id"], record["pending"][0]["token"] = old_run, old_token
    ticket.update(run_id=old_run, pending=record["pending"][0])
    c = store.client
    await c.rpush(f"{prefix}:thread:slack:C1:1.1:transcript", *transcript)
    await c.set(f"{prefix}:thread:slack:C1:1.1:run", old_run, ex=ttl)
    await c.set(f"{prefix}:run:{old_run}", json.dumps(record), ex=ttl)
    await c.set(f"{prefix}:token:{old_token}", json.dumps(ticket), ex=ttl)
    await c.zadd(f"{prefix}:index:paused", {old_run: record["pending"][0]["expires_at"]})
    await c.hset(f"{prefix}:outbox:C1:1.1", "answer:x", json.dumps({"version": 1, "sent_version": 0, "seq": 1,
                                                                    "text": "undelivered"}))
    await c.zadd(f"{prefix}:outbox-due", {"C1:1.1": 1.0})
    for key in (f"{prefix}:thread:slack:C1:1.1:transcript", f"{prefix}:index:paused", f"{prefix}:outbox:C1:1.1",
                f"{prefix}:outbox-due"):
        await c.expire(key, ttl)

    assert await store.migrate() == 5  # transcript, thread run, outbox hash, outbox-due entry, paused entry
    assert await store.migrate() == 0  # once
    assert await store.runs_due("paused", float("inf")) == [old_run]
    assert await store.outbox.due(time.time()) == ["C1:1.1"]
    assert [r.get("text") for r in await store.outbox.records("C1:1.1")] == ["undelivered"]

    fresh = make_harness(ScriptedModel([reply("restarted")]), RedisStore(store.client, keys=Keys(prefix)),
                         toolbox=toolbox)
    done = await fresh.engine.resume_token(old_token, Confirm(), by="UAPPROVER")
    assert done.status == "finished" and done.answer == "restarted" and len(toolbox.restarts.done) == 1
    after = await store.load_transcript("slack:C1:1.1")
    assert len(after) == len(transcript) + 2 and violations(after) == []
    assert await store.runs_due("paused", float("inf")) == []
    for key in [k async for k in c.scan_iter(match=f"{prefix}:*")]:
        assert await c.ttl(key) > 0, f"{key} has no TTL"
