"""Redis: reachable, authenticated, new enough, not evicting, persistent."""

from __future__ import annotations

from typing import Any

from redis.exceptions import AuthenticationError, ResponseError

from bot.probes import Check
from state import connect
from state.client import safe_url

MIN_REDIS = (6, 2)  # XAUTOCLAIM


def _info(raw: Any) -> dict[str, Any]:
    """INFO from one server, or the first node's of a cluster (redis-py answers per node there)."""
    if isinstance(raw, dict) and "redis_version" not in raw and raw:
        first = next(iter(raw.values()))
        return first if isinstance(first, dict) else {}
    return raw if isinstance(raw, dict) else {}


def _refused_credentials(exc: BaseException) -> bool:
    """WRONGPASS or NOAUTH: Redis answered, and wants other credentials (starting it would not help)."""
    text = str(exc)
    return isinstance(exc, AuthenticationError) or (
        isinstance(exc, ResponseError) and (text.startswith(("WRONGPASS", "NOAUTH")) or "NOAUTH" in text))


async def redis_checks(url: str, timeout_s: float = 3.0) -> list[Check]:
    client = connect(url, timeout_s=timeout_s)
    try:
        info = _info(await client.info())
        try:  # managed Redis may forbid CONFIG: then the save rules are unknown, not absent
            save: str | None = str((await client.config_get("save")).get("save", ""))
        except Exception:
            save = None
    except Exception as exc:  # anything: the check says what, the operator fixes it
        if _refused_credentials(exc):
            says = (f"refused the user or password in REDIS_URL at {safe_url(url)} (WRONGPASS)" if "@" in url
                    else f"asks for a password at {safe_url(url)} and REDIS_URL gives none (NOAUTH)")
            return [Check("Redis", False, says,
                          "put the user and password Redis expects in REDIS_URL (redis://user:password@host:port/0; "
                          "requirepass or the ACL user on the server)", refused=True)]  # serve refuses it too
        if isinstance(exc, ResponseError):  # it answered: an error of the URL's making (a database it lacks…)
            return [Check("Redis", False, f"answered at {safe_url(url)}: {' '.join(str(exc).split())[:200]}",
                          "fix REDIS_URL (its database number, user or options) or the server's config",
                          refused=True)]
        return [Check("Redis", False, f"not reachable at {safe_url(url)} ({type(exc).__name__})",
                      "start Redis or set REDIS_URL")]
    finally:
        await client.aclose()
    version = str(info.get("redis_version", "0"))
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    checks = [Check("Redis", parts >= MIN_REDIS, f"{version} at {safe_url(url)}",
                    f"Redis {'.'.join(map(str, MIN_REDIS))} or newer is needed (XAUTOCLAIM)")]
    policy = str(info.get("maxmemory_policy", "unknown"))
    checks.append(Check("Redis eviction", policy == "noeviction", f"maxmemory-policy is {policy}"
                        + ("" if policy == "noeviction" else ": paused runs and transcripts can be evicted"),
                        "CONFIG SET maxmemory-policy noeviction (and in redis.conf)"))
    aof = str(info.get("aof_enabled", "0")) == "1"
    if aof or save:
        checks.append(Check("Redis persistence", True, "AOF on" if aof else f"RDB snapshots (save {save})"))
    elif save is None:
        checks.append(Check("Redis persistence", False, "AOF off and the save rules cannot be read (CONFIG is "
                            "disabled)", "make sure the provider keeps snapshots or AOF", required=False))
    else:
        checks.append(Check("Redis persistence", False, "off: a Redis restart loses every paused run",
                            "appendonly yes (or save rules) in redis.conf"))
    return checks
