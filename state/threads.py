"""Reading threads back for reports (incident summaries, handovers): every run of one thread, and the threads
whose id starts with a prefix (a Slack channel's). Read-only.

No index names a thread's runs (the engine only keeps the latest), so they are found by scanning the thread's
shard's run keys. A summary or a handover is asked for by a person now and then, never on a hot path: a SCAN of
the keyspace, bounded, is cheaper than an index every commit would have to keep.
"""

from __future__ import annotations

from state.guard import guard, text
from state.keys import shard_of
from state.memory import MemoryStore
from state.records import RunRecord
from state.redis import RedisStore

SCAN_BATCH = 1000
MAX_RUNS = 200
"""A thread's runs read at most (the newest are kept): a summary of more would not be read either."""


def _glob(literal: str) -> str:
    """``literal`` with Redis glob's special characters escaped."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in literal)


async def runs_of_thread(store: RedisStore | MemoryStore, thread_id: str) -> list[RunRecord]:
    """The thread's runs still kept, oldest first."""
    if isinstance(store, MemoryStore):
        ids = [rid for rid in store._runs if rid.startswith(f"{shard_of(thread_id)}.")]
    else:
        prefix = store.keys.runs_of(thread_id)
        pattern = _glob(f"{prefix}{shard_of(thread_id)}.") + "*"
        ids = []
        async with guard("listing a thread's runs"):
            async for raw in store.client.scan_iter(match=pattern, count=SCAN_BATCH):
                rest = str(text(raw))[len(prefix):]
                if ":" not in rest:  # not a run's trace, journal or cancel flag
                    ids.append(rest)
    runs = [run for run in [await store.load_run(rid) for rid in ids] if run is not None
            and run.thread_id == thread_id]
    return sorted(runs, key=lambda r: r.created_at)[-MAX_RUNS:]


async def threads_with_prefix(store: RedisStore | MemoryStore, prefix: str) -> list[str]:
    """Ids of the threads with a latest run whose id starts with ``prefix`` (e.g. ``slack:C0OPS:``)."""
    if isinstance(store, MemoryStore):
        return sorted(t for t in store._thread_runs if t.startswith(prefix))
    sample = store.keys.thread_run(prefix + "\0")  # the key's shape, with a mark where the rest of the id goes
    tag = f"{{{shard_of(prefix + chr(0))}}}"
    head, _, tail = sample.partition("\0")
    before, _, after = head.partition(tag)
    pattern = _glob(before) + "{s?}" + _glob(after) + "*" + _glob(tail)  # every shard, one SCAN
    found: set[str] = set()
    async with guard("listing threads"):
        async for raw in store.client.scan_iter(match=pattern, count=SCAN_BATCH):
            key = str(text(raw))
            rest = key.split("}", 1)[1][len(after):] if "}" in key else ""
            if rest.endswith(tail) and len(rest) > len(tail):
                found.add(prefix + rest[:len(rest) - len(tail)])
    return sorted(found)
