"""Redis errors → :mod:`state.errors`, at one place for every Redis-backed part."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from state.errors import StoreError, StoreUnavailable


@asynccontextmanager
async def guard(what: str) -> AsyncIterator[None]:
    try:
        yield
    except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
        raise StoreUnavailable(f"Redis unreachable while {what}: {exc}") from exc
    except RedisError as exc:
        raise StoreError(f"Redis error while {what}: {exc}") from exc


def text(value: bytes | str | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value
