"""Redis: reachable, authenticated, new enough, taking writes, not evicting, persistent — every node of a Cluster."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import (
    AuthenticationError,
    InvalidResponse,
    NoPermissionError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    ResponseError,
)

from bot.probes import Check
from state import Keys, connect
from state.client import Client, safe_url

MIN_REDIS = (6, 2)  # XAUTOCLAIM
_WRITE_FIX: dict[type[ResponseError], str] = {  # what a refused write means, by the error redis-py raises
    ReadOnlyError: "this is a read-only replica: point REDIS_URL at the primary",
    OutOfMemoryError: "it is full (maxmemory reached, noeviction): raise maxmemory or free memory",
    NoPermissionError: "its ACL user may not write: give it +@write, +@scripting and +@stream on the key prefix",
}
_MISCONF_FIX = "it refuses writes because its snapshots fail: fix its RDB disk or permissions (see its log)"


def _refused_credentials(exc: BaseException) -> bool:
    """WRONGPASS or NOAUTH: Redis answered, and wants other credentials (starting it would not help)."""
    text = str(exc)
    return isinstance(exc, AuthenticationError) or (
        isinstance(exc, ResponseError) and (text.startswith(("WRONGPASS", "NOAUTH")) or "NOAUTH" in text))


async def _nodes(client: Client) -> dict[str, dict[str, Any]]:
    """INFO of each node (one entry for a single Redis), its save rules under ``save`` (None: CONFIG is
    forbidden, as managed Redis may: then they are unknown, not absent)."""
    if not isinstance(client, RedisCluster):
        return {"": await _node(client, {})}
    return {node.name: await _node(client, {"target_nodes": node}) for node in client.get_nodes()}


async def _node(client: Any, target: dict[str, Any]) -> dict[str, Any]:
    try:
        info = dict(await client.info(**target))
    except NoPermissionError:  # an ACL user without INFO (+@all -@dangerous), as serve needs none: not known
        return {"forbidden": True, "save": None}
    try:
        info["save"] = str((await client.config_get("save", **target)).get("save", ""))
    except ResponseError:
        info["save"] = None
    return info


async def _written(client: Client, prefix: str) -> tuple[str, str] | None:
    """What a short-lived write meets (a replica, a full Redis, failing snapshots, a read-only ACL user) and its
    fix, or None: written."""
    try:
        await client.set(Keys(prefix).write_probe("probe"), "1", px=5000)
    except ResponseError as exc:
        text = " ".join(str(exc).split())[:200]
        misconf = _MISCONF_FIX if text.startswith("MISCONF") else "let this user write under the key prefix"
        return text, _WRITE_FIX.get(type(exc), misconf)
    return None


def _failure(url: str, exc: BaseException) -> Check:
    if _refused_credentials(exc):
        parts = urlsplit(url)  # a password in the URL or as an option was refused; none given was asked for
        given = bool(parts.password) or "password=" in parts.query
        says = (f"refused the user or password in REDIS_URL at {safe_url(url)} (WRONGPASS)" if given
                else f"asks for a password at {safe_url(url)} and REDIS_URL gives none (NOAUTH)")
        return Check("Redis", False, says, "put the user and password Redis expects in REDIS_URL (redis://user:"
                     "password@host:port/0; requirepass or the ACL user on the server)", refused=True)
    if isinstance(exc, ResponseError):  # it answered: an error of the URL's making (a database it lacks…)
        return Check("Redis", False, f"answered at {safe_url(url)}: {' '.join(str(exc).split())[:200]}",
                     "fix REDIS_URL (its database number, user or options) or the server's config", refused=True)
    if isinstance(exc, RedisClusterException):  # reached, and the cluster itself is the problem
        return Check("Redis", False, f"the Cluster at {safe_url(url)} is not usable: {str(exc)[:200]}",
                     "make every slot covered by a reachable primary (redis-cli --cluster check)")
    if isinstance(exc, InvalidResponse):  # an HTTP server, an SSH banner…
        return Check("Redis", False, f"something answered at {safe_url(url)} that does not speak Redis "
                     f"({type(exc).__name__})", "point REDIS_URL at a Redis server (host and port)")
    return Check("Redis", False, f"not reachable at {safe_url(url)} ({type(exc).__name__}: {str(exc)[:120]})",
                 "start Redis, or point REDIS_URL at one (host, port; rediss:// for TLS)")


async def redis_checks(url: str, timeout_s: float = 3.0, prefix: str = "opspilot") -> list[Check]:
    """Read-only but for one write under ``prefix`` that lapses in 5 s: nothing else shows whether a Redis takes
    writes (a replica, a full one, failing snapshots, an ACL user with read rights only all answer INFO)."""
    client = connect(url, timeout_s=timeout_s)
    try:
        state = str((await client.cluster_info()).get("cluster_state")) if isinstance(client, RedisCluster) else ""
        nodes = await _nodes(client)
        refused_write = await _written(client, prefix) if state in ("", "ok") else None
    except Exception as exc:  # anything: the check says what, the operator fixes it
        return [_failure(url, exc)]
    finally:
        await client.aclose()
    info = next(iter(nodes.values()))
    version = str(info.get("redis_version", "0"))
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    cluster = f", a Cluster of {len(nodes)} nodes" if state else ""
    checks = [Check("Redis", parts >= MIN_REDIS, f"{version} at {safe_url(url)}{cluster}",
                    f"Redis {'.'.join(map(str, MIN_REDIS))} or newer is needed (XAUTOCLAIM)")]
    if info.get("forbidden"):
        checks = [Check("Redis", True, f"answers at {safe_url(url)}{cluster}; this user may not run INFO, so its "
                        f"version is not known (Redis {'.'.join(map(str, MIN_REDIS))} or newer is needed)")]
    if state and state != "ok":
        checks.append(Check("Redis Cluster", False, f"cluster_state is {state}: some slots have no reachable "
                            "primary, and every key there fails", "bring the failed primaries back or fail them "
                            "over (redis-cli --cluster check)"))
    if not state and str(info.get("cluster_enabled", "0")) == "1":
        checks.append(Check("Redis Cluster", False, "this server is a Cluster node, and REDIS_URL names one server: "
                            "most keys would be MOVED elsewhere", "use redis+cluster://host:port[,host:port…]"))
    elif refused_write is not None:
        checks.append(Check("Redis writes", False, f"refused a write: {refused_write[0]}", refused_write[1]))
    checks += _per_node(nodes)
    return checks


def _per_node(nodes: dict[str, dict[str, Any]]) -> list[Check]:
    """Eviction and persistence, judged on every node (one that evicts loses the keys in its slots)."""

    def where(name: str) -> str:
        return f" on {name}" if len(nodes) > 1 else ""

    if any(i.get("forbidden") for i in nodes.values()):
        return [Check("Redis eviction and persistence", False, "not known: this user may not run INFO",
                      "make sure maxmemory-policy is noeviction and snapshots or AOF are on", required=False)]

    evicting = [(n, str(i.get("maxmemory_policy", "unknown"))) for n, i in nodes.items()
                if str(i.get("maxmemory_policy", "unknown")) != "noeviction"]
    policy = evicting[0][1] if evicting else "noeviction"
    checks = [Check("Redis eviction", not evicting,
                    f"maxmemory-policy is {policy}{where(evicting[0][0]) if evicting else ''}"
                    + ("" if not evicting else ": paused runs and transcripts can be evicted"),
                    "CONFIG SET maxmemory-policy noeviction (and in redis.conf)")]
    lost = [n for n, i in nodes.items() if str(i.get("aof_enabled", "0")) != "1" and i["save"] is not None
            and not i["save"]]
    unknown = [n for n, i in nodes.items() if str(i.get("aof_enabled", "0")) != "1" and i["save"] is None]
    save = next((i["save"] for i in nodes.values() if i["save"]), "")
    snapshots = [n for n, i in nodes.items() if str(i.get("aof_enabled", "0")) != "1"]
    if not lost and not unknown and not snapshots:
        checks.append(Check("Redis persistence", True, "AOF on"))
    elif not lost and not unknown:
        # A crash goes back to the last snapshot: a confirmation, a change's journal mark, a run that ran since are
        # gone, and the card comes back as waiting (then "expired: nothing was run", which is not known).
        checks.append(Check("Redis persistence", False, f"RDB snapshots only (save {save}){where(snapshots[0])}: a "
                            "Redis crash loses what was written since the last snapshot, decisions and changes run "
                            "included", "appendonly yes, appendfsync everysec (in redis.conf)", required=False))
    elif not lost:
        checks.append(Check("Redis persistence", False, "AOF off and the save rules cannot be read (CONFIG is "
                            "disabled)", "make sure the provider keeps snapshots or AOF", required=False))
    else:
        checks.append(Check("Redis persistence", False, f"off{where(lost[0])}: a Redis restart loses every paused "
                            "run", "appendonly yes (or save rules) in redis.conf"))
    return checks
