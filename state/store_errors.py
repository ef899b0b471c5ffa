"""Store errors::

    StoreError            the state layer could not do what was asked
    ├── StoreUnavailable  Redis is unreachable or timed out
    ├── CorruptRecord     a stored record is unreadable or of an unknown schema (affects that run only)
    └── LeaseLost         another worker holds the thread now: this one's write was refused (it stops quietly)
"""

import logging


class StoreError(Exception):
    pass


class StoreUnavailable(StoreError):
    pass


class LeaseLost(StoreError):
    """This worker's lease on the thread lapsed (it could not renew in time) and another worker took the thread:
    its writes are refused, so two workers never write one thread's transcript."""


class CorruptRecord(StoreError):
    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"stored record {key} is unreadable: {problem}")
        self.key = key


def level_of(exc: BaseException) -> int:
    """How loud a loop logs a store failure: an outage is told once by the outage log (core/outages.py), so
    the loop's own line is DEBUG; any other store error stays a WARNING."""
    return logging.DEBUG if isinstance(exc, StoreUnavailable) else logging.WARNING
