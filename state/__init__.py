"""Everything OpsPilot keeps in Redis: transcripts, runs, traces, pending interrupts, leases.

Public API: :class:`Store` (the protocol the engine uses), :class:`RedisStore`,
:class:`MemoryStore` (in-process, non-durable), the stored records, and
:class:`StoreError` / :class:`CorruptRecord`.
"""

from state.errors import CorruptRecord, StoreError, StoreUnavailable
from state.keys import Keys, Ttls
from state.memory import MemoryStore
from state.records import (
    SCHEMA_VERSION,
    CallTrace,
    PendingCall,
    RunRecord,
    StepTrace,
    TraceEntry,
)
from state.redis import RedisStore, connect
from state.store import Claim, Stats, Store, Write

__all__ = [
    "SCHEMA_VERSION",
    "CallTrace",
    "Claim",
    "CorruptRecord",
    "Keys",
    "MemoryStore",
    "PendingCall",
    "RedisStore",
    "RunRecord",
    "Stats",
    "StepTrace",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "TraceEntry",
    "Ttls",
    "Write",
    "connect",
]
