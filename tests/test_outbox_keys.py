"""The outbox's keys keep their TTLs with fewer commands (issue 39): a write that makes the thread's hash or its
shard's due index sets the TTL itself; otherwise each process renews them once an hour."""

from __future__ import annotations

import time

from state import RedisStore
from state.keys import Renewals, shard_of
from state.outbox_store import Delivered, Due, MemoryOutbox, RedisOutbox


def _outbox(store: RedisStore) -> RedisOutbox:
    return RedisOutbox(store.client, store.keys, store.ttls)


async def test_a_write_that_makes_a_key_sets_its_ttl_and_later_writes_leave_it(store: RedisStore) -> None:
    outbox = _outbox(store)
    thread, hashed, due = "C1:1.1", store.keys.outbox("C1:1.1"), store.keys.outbox_due(shard_of("C1:1.1"))
    await outbox.put(thread, "progress:r1", {"text": "v1"}, due=0)
    assert 0 < await store.client.ttl(hashed) <= store.ttls.thread_s
    assert 0 < await store.client.ttl(due) <= store.ttls.thread_s
    for key in (hashed, due):
        await store.client.expire(key, 100)
    await outbox.put(thread, "progress:r1", {"text": "v2"}, due=0)
    await outbox.put(thread, "answer:r1", {"text": "done"}, due=0)
    assert await store.client.ttl(hashed) <= 100 and await store.client.ttl(due) <= 100  # renewed this hour
    outbox.renewals = Renewals(every_s=0)  # an hour later
    await outbox.put(thread, "progress:r1", {"text": "v3"}, due=0)
    assert await store.client.ttl(hashed) > 100 and await store.client.ttl(due) > 100


async def test_keys_gone_behind_a_process_s_back_are_made_again_with_ttls(store: RedisStore) -> None:
    """Renewed this hour as far as the process knows, but gone (Redis lost them): the write that makes them again
    still sets their TTLs, and the due index's sentinel is not counted as a thread waiting."""
    outbox = _outbox(store)
    thread, hashed, due = "C2:2.2", store.keys.outbox("C2:2.2"), store.keys.outbox_due(shard_of("C2:2.2"))
    await outbox.put(thread, "answer:r2", {"text": "one"}, due=0)
    await store.client.delete(hashed, due)
    await outbox.put(thread, "answer:r2", {"text": "two"}, due=0)
    assert await store.client.ttl(hashed) > 0 and await store.client.ttl(due) > 0
    assert await outbox.backlog() == 1
    (record,) = await outbox.records(thread)
    await outbox.patch(thread, "answer:r2", {"ts": "5.5"}, delivered=record.version)
    assert not await outbox.settle(thread, retry_at=0)
    assert await outbox.backlog() == 0 and await outbox.due(now=1e12) == []
    assert await store.client.ttl(due) > 0  # the sentinel keeps the index, and its TTL, while no thread waits


async def test_a_round_s_settle_lets_go_of_its_lease_and_never_of_another_s(store: RedisStore) -> None:
    """The settle and the release are one script: the round's own lease goes; a lease another instance took
    after ours lapsed is left as it is (its own expiry), and that instance delivers on."""
    outbox = _outbox(store)
    thread, lease = "C3:3.3", store.keys.outbox_lease("C3:3.3")
    await outbox.put(thread, "answer:r3", {"text": "hi"}, due=0)
    assert await outbox.lease(thread, "a", 20_000)
    assert await outbox.settle(thread, retry_at=0, release="a")  # still undelivered: still due
    assert await store.client.exists(lease) == 0
    assert await outbox.lease(thread, "b", 20_000)
    await outbox.settle(thread, retry_at=0, release="a")
    assert await store.client.get(lease) == "b" and 15_000 < await store.client.pttl(lease) <= 20_000
    await outbox.release(thread, "a")
    assert await store.client.get(lease) == "b"
    await outbox.release(thread, "b")
    assert await store.client.exists(lease) == 0


async def test_a_run_s_shown_state_is_saved_with_its_message_and_keeps_a_ttl(store: RedisStore) -> None:
    """What a run shows (its progress state) is saved by the script that records its message: any instance
    renders the run's next event from it."""
    outbox = _outbox(store)
    thread, states = "C4:4.4", store.keys.outbox_state("C4:4.4")
    assert await outbox.shown_state(thread, "r4") is None
    await outbox.put(thread, "progress:r4", {"text": "working"}, due=0, state=("r4", '{"step":1}'))
    assert await outbox.shown_state(thread, "r4") == '{"step":1}'
    assert 0 < await store.client.ttl(states) <= store.ttls.thread_s
    await store.client.expire(states, 100)
    await outbox.put(thread, "progress:r4", {"text": "step 2"}, due=0, state=("r4", '{"step":2}'))
    assert await outbox.shown_state(thread, "r4") == '{"step":2}' and await store.client.ttl(states) <= 100
    await outbox.put(thread, "progress:r5", {"text": "working"}, due=0, state=("r5", '{"step":0}'))
    assert await store.client.ttl(states) > 100  # a new run's first state renews it
    await store.client.delete(states)
    await outbox.save_state(thread, "r5", '{"step":1}')
    assert await outbox.shown_state(thread, "r5") == '{"step":1}' and await store.client.ttl(states) > 0
    assert [r.key for r in await outbox.records(thread)] == ["progress:r4", "progress:r5"]  # states are not records


async def test_a_settle_that_finds_its_index_gone_makes_it_again_with_a_ttl(store: RedisStore) -> None:
    outbox = _outbox(store)
    thread, due = "C6:6.6", store.keys.outbox_due(shard_of("C6:6.6"))
    await outbox.put(thread, "answer:r6", {"text": "hi"}, due=0)
    await store.client.delete(due)  # gone between the write and its round (expired, or deleted by hand)
    assert await outbox.settle(thread, retry_at=5.0)
    assert await store.client.ttl(due) > 0 and await outbox.due(now=10.0) == [thread]


async def test_a_round_s_settle_saves_what_it_sent_and_a_newer_state_stays_due(store: RedisStore) -> None:
    """What a round sent is saved by its settle, as a patch would have saved it (the ts kept, the text dropped),
    in the script that decides whether the thread is still due: a state put while the round was sending keeps
    the thread due, with its text."""
    outbox = _outbox(store)
    thread = "C5:5.5"
    await outbox.put(thread, "answer:r5", {"text": "done", "blocks": "[]"}, due=0)
    await outbox.put(thread, "progress:r5", {"text": "step 1"}, due=0)
    answer, progress = await outbox.records(thread)
    await outbox.put(thread, "progress:r5", {"text": "step 2"}, due=0)  # newer than what the round sends
    sent = [Delivered(answer.key, {"ts": "7.1", "attempted": False}, answer.version),
            Delivered(progress.key, {"ts": "7.2", "attempted": False}, progress.version)]
    assert await outbox.settle(thread, retry_at=0, delivered=sent)  # step 2 is still to send
    saved = {r.key: r for r in await outbox.records(thread)}
    assert saved["answer:r5"].get("ts") == "7.1" and not saved["answer:r5"].dirty
    assert saved["answer:r5"].get("text") is None and saved["answer:r5"].get("blocks") is None
    assert saved["progress:r5"].get("ts") == "7.2" and saved["progress:r5"].dirty
    assert saved["progress:r5"].get("text") == "step 2"
    again = Delivered(progress.key, {"ts": "7.2"}, saved["progress:r5"].version)
    assert not await outbox.settle(thread, retry_at=0, delivered=[again])  # all sent: the thread leaves the index
    assert await outbox.due(now=1e12) == []


async def test_an_answer_put_while_a_round_waits_out_a_progress_edit_is_due_at_once(store: RedisStore) -> None:
    """A round reads the thread (a progress edit, waiting out its interval), then the answer is put: its settle
    must not push the thread back to the edit's time, which the answer would wait out too (seen in the served
    benchmark: answers a second late). A newer progress state alone keeps the round's time."""
    for outbox in (_outbox(store), MemoryOutbox()):
        thread, later = "C7:7.7", time.time() + 60
        await outbox.put(thread, "progress:r7", {"text": "step 1"}, due=0)
        seen = {r.key: r.version for r in await outbox.records(thread)}
        await outbox.put(thread, "progress:r7", {"text": "step 2"}, due=time.time())
        assert await outbox.settle(thread, retry_at=later, seen=seen) is Due.LATER
        assert await outbox.due(now=later - 1) == []
        seen = {r.key: r.version for r in await outbox.records(thread)}
        await outbox.put(thread, "answer:r7", {"text": "done"}, due=time.time(), urgent=True)
        assert await outbox.settle(thread, retry_at=later, seen=seen) is Due.NOW
        assert await outbox.due(now=time.time()) == [thread]
        seen = {r.key: r.version for r in await outbox.records(thread)}  # the next round read the answer too
        assert await outbox.settle(thread, retry_at=later, seen=seen) is Due.LATER


async def test_a_write_says_when_its_thread_is_due_for_sure_so_its_round_need_not_ask(store: RedisStore) -> None:
    """A message put into a thread not waiting for anything, or an urgent one, makes the thread due by the put's
    time: its writer's next round skips the look in the due index. A progress edit put while the thread waits out
    a backoff keeps the later time, and says it does not know (the round looks)."""
    for outbox in (_outbox(store), MemoryOutbox()):
        thread = "C8:8.8"
        assert (await outbox.put(thread, "progress:r8", {"text": "v1"}, due=10.0)).due_by == 10.0
        assert await outbox.settle(thread, retry_at=500.0) is Due.LATER  # a retry waits (Slack failed)
        assert (await outbox.put(thread, "progress:r8", {"text": "v2"}, due=20.0)).due_by is None
        assert await outbox.due(now=100.0) == []  # still waiting out its backoff
        put = await outbox.put(thread, "answer:r8", {"text": "done"}, due=30.0, urgent=True)
        assert (put.version, put.due_by) == (1, 30.0) and await outbox.due(now=30.0) == [thread]
