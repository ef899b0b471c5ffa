"""Errors the engine raises to its caller (the chat, Slack). Tool failures are never among them::

    EngineError                 the request could not be carried out; ``str(exc)`` is safe to show
    ├── ThreadBusy              another turn of this thread is running
    ├── RunNotFound             no such run (or it expired)
    ├── InvalidDecision         the answer does not fit the question (e.g. invalid form values); nothing consumed
    └── ResumeRefused           the question can no longer be answered by this person
        ├── AlreadyHandled      someone else answered first (``holder``)
        ├── InterruptExpired    it expired
        ├── NotPending          the call is not waiting for anyone
        └── NotYours            a message in the thread may not set its open questions aside (only those who may
                                answer them can); nothing consumed

Store failures surface as :class:`state.StoreError`; a corrupt record as :class:`state.CorruptRecord`; one once the
run was under way (its question taken, or a decision recorded) as :class:`StoreLostMidRun`: the sweep carries it
on once the store is back, so nobody is to be told it was not taken.
"""

from state.store_errors import StoreError


class EngineError(Exception):
    pass


class ThreadBusy(EngineError):
    pass


class RunNotFound(EngineError):
    pass


class InvalidDecision(EngineError):
    """An answer that does not fit its question. ``code`` (``missing``, ``not_a_choice``) with the ``fields`` and
    ``choices`` concerned lets a front end say it in the person's language; the message is its English."""

    def __init__(self, message: str, code: str = "", fields: tuple[str, ...] = (),
                 choices: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.code, self.fields, self.choices = code, fields, choices


class ResumeRefused(EngineError):
    pass


class AlreadyHandled(ResumeRefused):
    def __init__(self, holder: str, *, unsettled_s: float = 0.0, age_s: float = 0.0) -> None:
        super().__init__(f"already handled by {holder}")
        self.holder, self.age_s = holder, age_s
        self.unsettled_s = unsettled_s
        """Seconds until the claim may be taken over when it may never have been decided (its holder cut off by
        an outage after claiming); 0 when it was decided, or that is not known here."""


class InterruptExpired(ResumeRefused):
    pass


class NotPending(ResumeRefused):
    pass


class NotYours(ResumeRefused):
    pass


class StoreLostMidRun(StoreError):
    """The store went away while a run was under way: the run exists (and may have changed something).
    ``applied``: False while a person's decision was being applied (claimed, its change maybe started)."""

    def __init__(self, message: str, run_id: str, *, applied: bool = True) -> None:
        super().__init__(message)
        self.run_id, self.applied = run_id, applied
