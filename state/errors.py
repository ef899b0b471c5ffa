"""Store errors::

    StoreError            the state layer could not do what was asked
    ├── StoreUnavailable  Redis is unreachable or timed out
    └── CorruptRecord     a stored record is unreadable or of an unknown schema (affects that run only)
"""


class StoreError(Exception):
    pass


class StoreUnavailable(StoreError):
    pass


class CorruptRecord(StoreError):
    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"stored record {key} is unreadable: {problem}")
        self.key = key
