"""Values whose shape is checked when the configuration is read, not where they are first used: a Redis URL that
redis-py would refuse (or read as something else) is one line naming it, never a traceback in every command."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from core.urls import safe_url

REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster")  # what state.client.connect takes


def http_url(value: str) -> str:
    """``value``, or ValueError saying it is no http(s) URL (``http://[::1/`` included: urlsplit raises there)."""
    try:
        parts = urlsplit(value)
        _ = parts.port
    except ValueError as exc:
        raise ValueError(f"must be an http(s) URL: {safe_url(value)!r} is not a URL ({exc})") from exc
    if not parts.scheme.startswith("http") or not parts.netloc:
        raise ValueError(f"must be an http(s) URL, got {safe_url(value)!r}")
    return value


def redis_url(value: str) -> str:
    """``value``, stripped, or ValueError saying what is wrong with it."""
    value = value.strip()
    parts = urlsplit(value)
    if parts.scheme not in REDIS_SCHEMES:
        raise ValueError(f"{safe_url(value)!r} is not a Redis URL: it must start with redis://, rediss:// (TLS) or "
                         "unix:// (e.g. redis://localhost:6379/0), or redis+cluster:// for a Redis Cluster")
    try:
        for node in parts.netloc.rpartition("@")[2].split(","):  # a cluster's URL names several host:port
            where = urlsplit(f"//{node}")
            _ = where.port  # a port that is not a number, or out of range, raises
            if parts.scheme != "unix" and not where.hostname:  # redis://:@/ would dial whatever answers
                raise ValueError("no host")
        if parts.scheme in ("redis", "rediss") and parts.path.strip("/") and not parts.path.strip("/").isdigit():
            # redis-py ignores a database that is not a number: /l3 would be database 0, another installation's
            raise ValueError(f"the database {parts.path.strip('/')!r} is not a number")
        if parts.query and "cluster" not in parts.scheme:
            _options(parts.query)
    except ValueError as exc:
        raise ValueError(f"{safe_url(value)!r} is not a Redis URL ({exc}): e.g. redis://localhost:6379/0") from exc
    return value


def _options(query: str) -> None:
    """The URL's ``?options`` as redis-py reads them: one it does not know, or a value it cannot read, raises."""
    from redis.connection import URL_QUERY_ARGUMENT_PARSERS, parse_url

    known = {*URL_QUERY_ARGUMENT_PARSERS, "ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile",
             "ssl_ca_path", "ssl_ca_data", "ssl_password", "client_name", "username", "password"}
    unknown = sorted(set(parse_qs(query)) - known)
    if unknown:
        raise ValueError(f"unknown option {unknown[0]!r}; known: {', '.join(sorted(URL_QUERY_ARGUMENT_PARSERS))}")
    parse_url(f"redis://localhost/?{query}")  # type: ignore[no-untyped-call]  # "socket_timeout=abc" raises
