"""Store errors::

    StoreError            the state layer could not do what was asked
    ├── StoreUnavailable  Redis is unreachable or timed out
    ├── CorruptRecord     a stored record is unreadable or of an unknown schema (affects that run only)
    └── LeaseLost         another worker holds the thread now: this one's write was refused (it stops quietly)
"""


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
