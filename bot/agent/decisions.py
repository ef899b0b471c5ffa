"""What a person (or the clock) answers to a paused call, and what that means for the tool path.

Each decision becomes a :mod:`tools.runtime` decision (:class:`Approved` or :class:`Denied`) and
runs through the same batch execution the loop uses."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import ValidationError

from bot.agent.engine_errors import AlreadyHandled, InvalidDecision, NotYours
from state.records import PendingCall, RunRecord, Ticket
from state.store import Locks
from tools.registry import Registry
from tools.runtime import Approved, Denied, ToolDecision

DecisionKind = Literal["confirmed", "submitted", "declined", "replied", "expired", "cancelled"]


@dataclass(frozen=True)
class Confirm:
    """Run the gated call exactly as stored."""

    kind: ClassVar[DecisionKind] = "confirmed"

    def for_tool(self, pending: PendingCall, by: str) -> ToolDecision:
        plan = pending.payload.get("plan") if isinstance(pending.payload, dict) else None
        return Approved(pending.arguments, confirmed_by=by, plan=plan if isinstance(plan, dict) else None)


@dataclass(frozen=True)
class ProvideParams:
    """Fill the missing fields; the merged arguments are validated (and gated) again before anything runs."""

    values: dict[str, Any] = field(default_factory=dict)
    kind: ClassVar[DecisionKind] = "submitted"

    def for_tool(self, pending: PendingCall, by: str) -> ToolDecision:
        return Approved({**pending.arguments, **self.values})


@dataclass(frozen=True)
class Decline:
    reason: str = ""
    kind: ClassVar[DecisionKind] = "declined"

    def for_tool(self, pending: PendingCall, by: str) -> ToolDecision:
        return Denied("declined_by_user", self.reason or f"{by} declined this call", arguments=pending.arguments)


@dataclass(frozen=True)
class ReplyInstead:
    """The person wrote in the thread instead of answering the form."""

    text: str
    kind: ClassVar[DecisionKind] = "replied"

    def for_tool(self, pending: PendingCall, by: str) -> ToolDecision:
        return Denied("user_replied_instead", f"the user replied instead: {self.text[:500]}", "cancelled",
                      pending.arguments)


@dataclass(frozen=True)
class Expire:
    """Nobody answered in time."""

    kind: ClassVar[DecisionKind] = "expired"

    def for_tool(self, pending: PendingCall, by: str) -> ToolDecision:
        return Denied("expired", "nobody answered in time; nothing was run", "expired", pending.arguments)


@dataclass(frozen=True)
class CancelRun:
    """The run was stopped while this call waited."""

    kind: ClassVar[DecisionKind] = "cancelled"

    def for_tool(self, pending: PendingCall, by: str) -> ToolDecision:
        return Denied("cancelled", "the run was stopped; nothing was run", "cancelled", pending.arguments)


Decision = Confirm | ProvideParams | Decline | ReplyInstead | Expire | CancelRun


@dataclass(frozen=True)
class Answers:
    """Decisions on some of a paused run's calls, by whom: the input of the next batch."""

    decided: list[tuple[PendingCall, Decision]]
    by: str

    @property
    def expired_only(self) -> bool:
        return all(isinstance(d, Expire) for _, d in self.decided)


def check_fits(pending: PendingCall, decision: Decision, registry: Registry) -> None:
    """Reject an answer that does not fit before anything is claimed, so the question stays open."""
    if isinstance(decision, Confirm) and pending.interrupt_type != "confirm_risky":
        raise InvalidDecision("this request asks for values, not a confirmation")
    if not isinstance(decision, ProvideParams):
        return
    if pending.interrupt_type != "params_required":
        raise InvalidDecision("this request asks for a confirmation, not values")
    asked = {f["name"]: f.get("choices") for f in pending.payload.get("fields", [])}
    if missing := [name for name in asked if decision.values.get(name) in (None, "")]:
        raise InvalidDecision(f"invalid values: {', '.join(missing)}: nothing chosen", "missing", tuple(missing))
    for name, value in decision.values.items():
        if name not in asked:
            raise InvalidDecision(f"invalid values: {name} was not asked for")
        if asked[name] and value not in asked[name]:
            raise InvalidDecision(f"invalid values: {name} must be one of {', '.join(map(str, asked[name]))}",
                                  "not_a_choice", (name,), tuple(map(str, asked[name])))
    spec = registry.get(pending.call.name)
    if spec is None:
        raise InvalidDecision(f"the tool {pending.call.name} is no longer available")
    try:
        spec.args_model.model_validate({**pending.arguments, **decision.values})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_url=False)[:5])
        raise InvalidDecision(f"invalid values: {problems}") from exc


async def check_open_and_fits(pending: PendingCall, decision: Decision, registry: Registry, locks: Locks) -> None:
    """:func:`check_fits`, unless the question was answered already: then that is what the person is told (a
    stale form's values are not judged, and the form does not come back)."""
    try:
        check_fits(pending, decision, registry)
    except InvalidDecision:
        if holder := await locks.claimed_by(pending.token):
            raise AlreadyHandled(holder) from None
        raise


SetAside = Callable[[Ticket], Awaitable[bool]]
"""Whether a message's author may set an open question aside by writing in its thread (a front's rule: in Slack,
whoever may decline its card)."""


async def claim_all(record: RunRecord, by: str, locks: Locks, *, stale_s: float,
                    may_set_aside: SetAside | None = None) -> None:
    """Claim every open question of ``record`` for one answer (a reply in the thread), or none of them. Refused
    (:class:`NotYours`, nothing claimed) where ``may_set_aside`` does not let ``by`` set one of them aside."""
    for p in record.pending:
        ticket = Ticket(run_id=record.run_id, thread_id=record.thread_id, requester=record.user_id, pending=p)
        if may_set_aside is not None and not await may_set_aside(ticket):
            raise NotYours(f"{p.call.name} waits for its answer on the card")
    won: list[str] = []
    for p in record.pending:
        claim = await locks.claim(p.token, by)
        if claim.won or claim.age_s >= stale_s:
            if not claim.won:
                await locks.take_claim(p.token, by)  # its holder died before deciding
            won.append(p.token)
            continue
        for token in won:  # someone is deciding one of them right now: leave them all as they were
            await locks.release_claim(token)
        raise AlreadyHandled(claim.holder)
