"""Connecting to Redis: one server (``redis://``, ``rediss://``, ``unix://``) or a Redis Cluster
(``redis+cluster://host:port[,host:port…]``, ``rediss+cluster://`` for TLS). The store works the same on both:
every atomic write stays within one hash slot (see :mod:`state.keys`)."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster

from core.urls import safe_url as safe_url  # where it was first defined: importers keep it

Client = aioredis.Redis | RedisCluster
"""What every store module talks to."""

_CLUSTER_SCHEMES = {"redis+cluster": False, "rediss+cluster": True}


def is_cluster_url(url: str) -> bool:
    return urlsplit(url).scheme in _CLUSTER_SCHEMES


def connect(url: str, *, timeout_s: float = 5.0, max_connections: int = 64) -> Client:
    """A client whose pool waits for a free connection (up to ``timeout_s``) rather than failing,
    so hundreds of concurrent runs share a bounded number of connections."""
    if is_cluster_url(url):
        return _cluster(url, timeout_s=timeout_s, max_connections=max_connections)
    pool = aioredis.BlockingConnectionPool.from_url(
        url, decode_responses=True, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
        max_connections=max_connections, timeout=timeout_s,
    )
    return aioredis.Redis(connection_pool=pool)


def _cluster(url: str, *, timeout_s: float, max_connections: int) -> RedisCluster:
    parts = urlsplit(url)
    # urlsplit keeps "user:pass@h1:p1,h2:p2" in netloc; its .hostname would only see the last node.
    credentials, _, hosts = parts.netloc.rpartition("@")
    username, _, password = credentials.partition(":")
    nodes = []
    for host in filter(None, hosts.split(",")):
        name, _, port = host.rpartition(":") if ":" in host else (host, "", "6379")
        try:
            nodes.append(ClusterNode(name or "127.0.0.1", int(port)))
        except ValueError as exc:
            raise ValueError(f"REDIS_URL: {host!r} is not host:port") from exc
    if not nodes:
        raise ValueError("REDIS_URL: a cluster URL names at least one node (redis+cluster://host:port)")
    # A cluster node's pool raises when it is full instead of waiting: give it headroom.
    return RedisCluster(
        startup_nodes=nodes, decode_responses=True, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
        max_connections=max(256, 4 * max_connections), username=unquote(username) or None,
        password=unquote(password) or None, ssl=_CLUSTER_SCHEMES[parts.scheme],
    )


def refusal(exc: BaseException) -> str | None:
    """What Redis said when it answered and refused (credentials, a database it lacks), following the chain of
    causes; None for an outage (nothing answered), where waiting may be all it takes."""
    from redis.exceptions import AuthenticationError, ResponseError

    while exc is not None:
        if isinstance(exc, AuthenticationError | ResponseError):
            return " ".join(str(exc).split())[:200]
        exc = exc.__cause__  # type: ignore[assignment]
    return None
