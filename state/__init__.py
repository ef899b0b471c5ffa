"""Everything OpsPilot keeps: transcripts, runs, tickets, the journal of changes, locks, front-end metadata.

Public API: the protocols in :mod:`state.store` (``Store`` with its ``journal`` and ``locks``, ``Reports``,
``MetaStore``), :class:`RedisStore` and :class:`MemoryStore` (in-process, non-durable), the stored
records, and :class:`StoreError` / :class:`StoreUnavailable` / :class:`CorruptRecord`.
"""

from state.client import connect, is_cluster_url
from state.keys import Keys, Ttls
from state.memory import MemoryStore
from state.records import (
    SCHEMA_VERSION,
    CallTrace,
    PendingCall,
    RunRecord,
    StepTrace,
    Ticket,
    TraceEntry,
)
from state.redis import RedisStore
from state.store import Claim, Journal, Locks, MetaStore, Opened, Outbox, Reports, Stats, Store, Write
from state.store_errors import CorruptRecord, LeaseLost, StoreError, StoreUnavailable

__all__ = [
    "SCHEMA_VERSION",
    "CallTrace",
    "Claim",
    "CorruptRecord",
    "Journal",
    "Keys",
    "LeaseLost",
    "Locks",
    "MemoryStore",
    "MetaStore",
    "Opened",
    "Outbox",
    "PendingCall",
    "RedisStore",
    "Reports",
    "RunRecord",
    "Stats",
    "StepTrace",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "Ticket",
    "TraceEntry",
    "Ttls",
    "Write",
    "connect",
    "is_cluster_url",
]
