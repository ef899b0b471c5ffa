"""URLs as logs, messages and ``opspilot check`` show them: without the credentials they may carry."""

from __future__ import annotations

import re

# A password or token given as an option (redis-py reads ?password=…, ?username=…; a proxy may take ?token=…).
_QUERY_SECRET = re.compile(r"([?&](?:[a-z_]*password|username|[a-z_]*token|api_?key|secret|auth)=)[^&#\s]*",
                           re.IGNORECASE)
_USERINFO = re.compile(r"(://)[^/@\s]*@")


def safe_url(url: str) -> str:
    """``url`` without its credentials: ``user:password@`` as ``…@``, ``?password=…`` (and the like) as ``***``."""
    return hidden_options(_USERINFO.sub(r"\1…@", url))


def hidden_options(url: str) -> str:
    """``url`` with the credentials given as options (``?password=…``, ``&token=…``) as ``***``."""
    return _QUERY_SECRET.sub(r"\1***", url)
