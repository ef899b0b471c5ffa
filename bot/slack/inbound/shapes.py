"""The shapes of Slack's payloads that Bolt and our listeners index into, checked before either reads a body.

Only what is read is checked (Bolt's id extractors and listener matchers, :mod:`bot.slack.router`,
:mod:`bot.slack.inbound.thread_reader`, :mod:`bot.slack.alerts.investigations`, :mod:`bot.slack.feedback.votes`,
:func:`bot.slack.outbound.blocks.form_values`); anything else Slack adds passes untouched. Strict: a number is not a
string, a list is not an object. Validation only — Bolt still reads the original body.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

Ts = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,11}(\.[0-9]{1,9})?$")]
"""A Slack timestamp (``1712345678.000200``): history compares them as numbers, and clocks read them (ASCII digits
only, and a time a clock can show)."""


class _Shape(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")
    present_not_null: ClassVar[tuple[str, ...]] = ()
    """Fields Bolt reads with ``.get(name, {})``: absent is fine, null is not."""

    @model_validator(mode="before")
    @classmethod
    def _no_null(cls, data: Any) -> Any:
        if isinstance(data, dict) and any(name in data and data[name] is None for name in cls.present_not_null):
            raise ValueError(f"one of {', '.join(cls.present_not_null)} is null")
        return data


class Ref(_Shape):
    """``{"id": …}``, where Slack may also send the bare id (Bolt takes either)."""

    id: str | None = None


class Who(_Shape):
    id: str


class Authorization(_Shape):
    team_id: str | None = None
    enterprise_id: str | None = None
    user_id: str | None = None


class Node(_Shape):
    """A block or rich-text element: rich_text() walks ``elements`` down, calling ``.get`` on each."""

    elements: list[Node] | None = None


class Attachment(_Shape):
    fields: list[Any] | None = None


class Message(_Shape):
    """A posted message as history, alert parsing and the alert sources read it."""

    ts: Ts | None = None
    thread_ts: Ts | None = None
    user: str | None = None
    text: str | None = None
    subtype: str | None = None
    bot_id: str | None = None
    app_id: str | None = None
    username: str | None = None
    bot_profile: dict[str, Any] | None = None
    blocks: list[Node] | None = None
    attachments: list[Attachment] | None = None
    files: list[dict[str, Any]] | None = None


class Event(_Shape):
    """Any event: what Bolt's extractors and its self-event filter read (``user_change`` carries a user
    object, ``channel_created`` a channel object)."""

    present_not_null = ("function", "tokens")

    type: str
    user: str | Ref | None = None
    channel: str | Ref | None = None
    team: str | Ref | None = None
    enterprise: str | Ref | None = None
    bot_id: str | None = None
    message: dict[str, Any] | None = None
    previous_message: dict[str, Any] | None = None
    function: dict[str, Any] | None = None
    tokens: dict[str, Any] | None = None


class Edited(Message):
    """A ``message_changed`` event's message, read as a posted one (an alert edited to say "resolved")."""

    ts: Ts


class Posted(Message):
    """``message`` and ``app_mention``: what inbound.on_message and the alerts read."""

    channel: str
    ts: Ts
    channel_type: str | None = None
    message: Edited | None = None


class HomeOpened(_Shape):
    user: str
    tab: str | None = None


EVENTS: dict[str, type[_Shape]] = {"message": Posted, "app_mention": Posted, "app_home_opened": HomeOpened}


class View(_Shape):
    type: str  # Bolt's workflow-step matcher indexes it
    callback_id: str | None = None
    team_id: str | None = None
    app_installed_team_id: str | None = None


class Action(_Shape):
    action_id: str
    block_id: str | None = None
    value: str | None = None


class Picked(_Shape):
    """One input's state: form_values reads ``selected_option.value`` or ``value``."""

    selected_option: dict[str, Any] | None = None


class State(_Shape):
    values: dict[str, dict[str, Picked] | None] | None = None


class Body(_Shape):
    """Every body, whatever its type: the fields Bolt's extractors read."""

    present_not_null = ("event", "view")

    type: str | None = None
    team: str | Ref | None = None
    enterprise: str | Ref | None = None
    user: str | Ref | None = None
    channel: str | Ref | None = None
    team_id: str | None = None
    enterprise_id: str | None = None
    user_id: str | None = None
    channel_id: str | None = None
    trigger_id: str | None = None
    callback_id: str | None = None
    action_id: str | None = None
    event_id: str | None = None
    thread_ts: str | None = None
    authorizations: list[Authorization] | None = None
    event: Event | None = None
    view: View | None = None
    message: dict[str, Any] | None = None
    previous_message: dict[str, Any] | None = None
    container: dict[str, Any] | None = None
    actions: list[dict[str, Any]] | None = None


class Callback(_Shape):
    event: Event


class Click(_Shape):
    """block_actions: what inbound.on_action reads (Bolt reads ``actions[0]``)."""

    user: Who
    channel: Ref | None = None
    message: Message | None = None
    state: State | None = None
    actions: list[Action] = Field(min_length=1)


class Legacy(_Shape):
    """interactive_message (attachment buttons): Bolt reads ``actions[0]``."""

    actions: list[dict[str, Any]] = Field(min_length=1)


class Shortcut(_Shape):
    """shortcut / message_action: Bolt matches ``callback_id``; inbound.on_shortcut reads the rest."""

    callback_id: str
    user: Who
    channel: Ref | None = None
    message: Message | None = None


class Where(Ref):
    id: str = Field(min_length=1)


class MessageShortcut(Shortcut):
    """message_action: always on a message, in a conversation (a missing one would be read as channel "None")."""

    channel: Where
    message: Message


class Submitted(View):
    callback_id: str
    private_metadata: str | None = None
    state: State | None = None


class Submission(_Shape):
    """view_submission / view_closed: Bolt matches ``view.callback_id``; the feedback form reads who sent it,
    its ``private_metadata`` and its state (:mod:`bot.slack.feedback.votes`)."""

    user: Who
    view: Submitted


class Command(_Shape):
    command: str
    user_id: str
    channel_id: str


TYPES: dict[str, type[_Shape]] = {"event_callback": Callback, "block_actions": Click, "shortcut": Shortcut,
                                  "message_action": MessageShortcut, "view_submission": Submission,
                                  "view_closed": Submission, "interactive_message": Legacy}


def check(body: dict[str, Any]) -> None:
    """Raises a ValueError (pydantic's ValidationError) when ``body`` is not shaped as Bolt and we read it."""
    Body.model_validate(body)  # first: what follows indexes by type, a string from here on
    if body.get("type") in TYPES:
        TYPES[body["type"]].model_validate(body)
    event = body.get("event")
    if event is not None and event["type"] in EVENTS:
        EVENTS[event["type"]].model_validate(event)
    if "command" in body:  # Bolt hands any body with a command to the slash-command listener
        Command.model_validate(body)
