"""What a Slack front hands on to be done (see :mod:`bot.slack.inbound.work`): each item a pydantic model, stored
in the work queue as JSON and read back by whichever worker takes it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from bot.agent.decisions import Confirm, Decision, Decline, ProvideParams
from state import Ticket
from state.timer_store import Timer


class _Item(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    channel: str
    thread_ts: str | None
    user: str


class Slots(BaseModel):
    """The run windows a start was counted in (:class:`bot.slack.inbound.run_gate.Admitted`): given back when the
    thread does not take its question (busy, its card someone else's), so that a start that started nothing counts
    for nothing."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    member: str
    windows: tuple[str, ...] = ()


class Offered(BaseModel):
    """The offer a question was pressed on — a "Roll back to …" under an answer, an alert's Investigate — claimed by
    the press and shown as taken only once the question is taken as a turn (:mod:`bot.slack.inbound.offers`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["rollback", "investigate"] = "rollback"
    claim: str
    """The offer's claim, held by ``holder``; let go when the question is not taken."""
    holder: str
    run: str = ""
    release: str = ""
    answer_ts: str = ""
    text: str = ""
    blocks: list[dict[str, Any]] = Field(default_factory=list)


class Converse(_Item):
    kind: Literal["converse"] = "converse"
    text: str
    request_id: str
    ts: str | None = None
    """The message's own ts, when it is a reply in a thread: the thread before it is read for the model."""
    context: str = ""
    """Quoted material that comes with the question (the alert or message it is about); already redacted."""
    unattended: bool = False
    """No person asked (an alert did): every change waits for a person's Confirm."""
    lang: Literal["en", "zh"] | None = None
    """A new thread's language, as decided where the question arrived (its words as typed, a colleague's name
    aside; no words at all: the person's latest thread's). None: from ``text``."""
    timer: Timer | None = None
    """The follow-up this turn is an occurrence of: its announcement says "ran" once the turn has run, "not run"
    when the thread was busy by then (a question taken meanwhile, a card waiting)."""
    offered: Offered | None = None
    """The offer this question was pressed on: taken once the turn runs, free again when it does not."""
    slots: Slots | None = None


class Answer(_Item):
    kind: Literal["answer"] = "answer"
    ticket: Ticket
    decision: Literal["confirm", "submit", "decline"]
    values: dict[str, str] = Field(default_factory=dict)
    reason: str = ""
    response_url: str = ""
    """The click's: its card is closed through it (see :mod:`bot.slack.outbound.responses`)."""
    card: dict[str, Any] = Field(default_factory=dict)
    """The card as clicked (blocks, text): a receipt on it while recording waits for the store."""

    def to_decision(self) -> Decision:
        if self.decision == "confirm":
            return Confirm()
        if self.decision == "submit":
            return ProvideParams(dict(self.values))
        return Decline(self.reason)


AUTOMATIC = "opspilot:auto"
"""The ``user`` of a Resume nobody pressed: a run whose worker died while it only read, carried on by itself
(see :mod:`bot.slack.catchup`)."""


class RunButton(_Item):
    kind: Literal["stop", "resume"]
    run_id: str


class Check(_Item):
    """One occurrence of a scheduled check (see :mod:`bot.slack.followups.checks`): ``user`` is who set it up."""

    kind: Literal["check"] = "check"
    timer: str
    due: int
    request_id: str
    question: str
    label: str
    """What it is, as lists show it: its name or question, its cron and time zone."""
    quiet: bool = False
    late_s: float = 0.0
    timezone: str = "UTC"
    """The schedule's: its times are said in it, as its other lines say them."""


class NotYet(Exception):
    """A stored request that could not be read just now (Slack or Redis away): left for a later round."""


class Delivery(BaseModel):
    """A Slack request exactly as a front received it (after its signature was checked), stored before it is
    acknowledged; a worker reads it as the front would have and hands on what it means."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["delivery"] = "delivery"
    body: str
    content_type: str
    received_at: float


WorkItem = Annotated[Converse | Answer | RunButton | Check, Field(discriminator="kind")]
Stored = Annotated[Converse | Answer | RunButton | Check | Delivery, Field(discriminator="kind")]
StoredAdapter: TypeAdapter[Stored] = TypeAdapter(Stored)
WorkAdapter: TypeAdapter[WorkItem] = TypeAdapter(WorkItem)
