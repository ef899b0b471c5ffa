"""Redis errors → :mod:`state.store_errors`, at one place for every Redis-backed part; retries through short outages."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

from redis.exceptions import (
    ClusterDownError,
    CrossSlotTransactionError,
    InvalidPipelineStack,
    RedisClusterException,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from core.outages import outage
from state.store_errors import LeaseLost, StoreError, StoreUnavailable

log = logging.getLogger(__name__)
T = TypeVar("T")
REDIS = outage("Redis")

LEASE_LOST = "OPSPILOT_LEASE_LOST"
"""What a script answers (as an error) when the writer no longer holds the thread's lease."""

# Compare-and-delete: only the holder lets go of a lease (threads' leases, the outbox's delivery leases). Not one
# GETDEL and a put-back: another owner's lease would come back with our length, not its own remaining time.
RELEASE_IF_HELD = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""
# A small hash's fields and its TTL in one step (KEYS: the hash; ARGV: its TTL, then field, value, …): one command
# fewer than MULTI, HSET, EXPIRE, EXEC (metadata; what a run shows).
HSET_WITH_TTL = """
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
"""
# Extend a lease only while it is still the owner's: one that lapsed is not silently taken again.
RENEW_IF_HELD = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end
return 0
"""


@asynccontextmanager
async def guard(what: str) -> AsyncIterator[None]:
    try:
        yield
    except (RedisConnectionError, RedisTimeoutError, OSError, ClusterDownError, TryAgainError) as exc:
        REDIS.failed(exc)  # the operator's log: once when it goes, a minute's summary, once when it is back
        raise StoreUnavailable(f"Redis unreachable while {what}: {exc}") from exc
    except (CrossSlotTransactionError, InvalidPipelineStack) as exc:  # our bug, not an outage
        raise StoreError(f"Redis Cluster refused a request while {what}: {exc}") from exc
    except RedisClusterException as exc:  # no node answers, a slot is not served (a cluster in failover)
        REDIS.failed(exc)
        raise StoreUnavailable(f"Redis Cluster unavailable while {what}: {exc}") from exc
    except ResponseError as exc:
        if str(exc).startswith(LEASE_LOST):  # a script refused a write: someone else holds the thread
            raise LeaseLost(f"{what}: refused, {str(exc).removeprefix(LEASE_LOST).strip()} holds the thread "
                            "now") from exc
        raise StoreError(f"Redis error while {what}: {exc}") from exc
    except RedisError as exc:
        raise StoreError(f"Redis error while {what}: {exc}") from exc
    else:
        REDIS.ok()


def text(value: bytes | str | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


async def retried(what: str, grace_s: float, operation: Callable[[], Awaitable[T]]) -> T:
    """``operation`` (which must be safe to repeat) retried while Redis is unreachable, for up to ``grace_s``:
    a short outage (a failover, a restart) delays the work instead of dropping it."""
    deadline = time.monotonic() + grace_s
    delay = 0.1
    while True:
        try:
            async with guard(what):
                return await operation()
        except StoreUnavailable:
            if time.monotonic() + delay > deadline:
                raise
            log.debug("Redis unreachable while %s; retrying for up to %.0fs more", what, deadline - time.monotonic())
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
