"""The conversation model: exactly four message kinds, one JSON adapter.

Provider wire formats (Anthropic blocks, OpenAI ``role: tool``) never appear here;
the model adapters translate at the edge. A tool result carries its ``error_code`` as a
field, so nobody re-reads the JSON the model sees to learn why a call failed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

from core.text import well_formed

ResultStatus = Literal["ok", "error", "cancelled", "skipped", "expired"]
DECLINED = "declined_by_user"
"""A person pressed Decline: the model reads it as an error result, nothing counts it as a failure."""


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolCall(BaseModel):
    """One tool call proposed by the model; ``id`` pairs it with exactly one result."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    # Set only when the provider sent arguments that were not a JSON object; the
    # runtime answers such a call with a validation_error instead of running it.
    raw_arguments: str | None = None

    # A model's half emoji (a lone surrogate) could be neither stored nor digested: U+FFFD in its place.
    _well_formed = field_validator("id", "name", "arguments", "raw_arguments", mode="before")(well_formed)


class SystemMessage(_Message):
    role: Literal["system"] = "system"
    content: str


class UserMessage(_Message):
    role: Literal["user"] = "user"
    content: str
    _well_formed = field_validator("content", mode="before")(well_formed)
    user_id: str | None = None
    request_id: str | None = None
    """The front end's id of the message (e.g. Slack channel and ts): a redelivered one is recognised."""


class AssistantMessage(_Message):
    role: Literal["assistant"] = "assistant"
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    _well_formed = field_validator("content", mode="before")(well_formed)


class ToolResultMessage(_Message):
    role: Literal["tool"] = "tool"
    call_id: str
    name: str
    content: str
    status: ResultStatus = "ok"
    _well_formed = field_validator("content", mode="before")(well_formed)
    error_code: str | None = None
    """Why the call did not succeed (``validation_error``, ``declined_by_user``…); None when ok."""

    @property
    def is_error(self) -> bool:
        return self.status != "ok"

    @property
    def failed(self) -> bool:
        """It did not work: an error, but not a person's decline (a decision, never a failure to count)."""
        return self.status == "error" and self.error_code != DECLINED

    @model_validator(mode="before")
    @classmethod
    def _legacy_error_code(cls, data: Any) -> Any:
        """Results stored before ``error_code`` existed carry it only inside their content."""
        if isinstance(data, dict) and data.get("status", "ok") != "ok" and "error_code" not in data:
            try:
                body = json.loads(data.get("content") or "")
            except ValueError:
                body = None
            code = body.get("errorCode") if isinstance(body, dict) else None
            data = {**data, "error_code": code if isinstance(code, str) else "unknown"}
        return data


Message = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolResultMessage,
    Field(discriminator="role"),
]
MessageAdapter: TypeAdapter[Message] = TypeAdapter(Message)


def dump_message(message: Message) -> str:
    """As stored: defaults left out (restored on load: an answer's empty ``tool_calls``, a result's ``ok``
    status), but the role, which tells the message kinds apart."""
    body = message.model_dump_json(exclude_defaults=True)
    head = f'{{"role":"{message.role}"'
    return f"{head}}}" if body == "{}" else f"{head},{body[1:]}"


def took(messages: Sequence[Message], request_id: str, look_back: int = 200) -> bool:
    """Whether the thread's recent messages include the front end's message ``request_id`` (a redelivery)."""
    return any(isinstance(m, UserMessage) and m.request_id == request_id for m in messages[-look_back:])


def load_message(raw: str | bytes) -> Message:
    return MessageAdapter.validate_json(raw)


def ok_content(data: Any) -> str:
    """The content the model reads for a successful call: JSON (a NaN or an infinity, which JSON has no word for,
    is null: ``NaN`` in the text would not parse)."""
    try:
        return json.dumps({"ok": True, "data": data}, ensure_ascii=False, default=str, allow_nan=False)
    except ValueError:
        return json.dumps({"ok": True, "data": _finite(data)}, ensure_ascii=False, default=str)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def error_content(code: str, message: str, **extra: Any) -> str:
    """The content the model reads for a call that did not succeed."""
    body: dict[str, Any] = {"ok": False, "errorCode": code, "message": message}
    body.update(extra)
    return json.dumps(body, ensure_ascii=False, default=str)


def error_result(call: ToolCall, code: str, message: str, status: ResultStatus = "error") -> ToolResultMessage:
    return ToolResultMessage(call_id=call.id, name=call.name, content=error_content(code, message), status=status,
                             error_code=code)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def result_body(content: str) -> dict[str, Any]:
    """A tool result's JSON body (``{"ok": true, "data"}`` or ``{"ok": false, "errorCode", "message"}``), for a
    front end to say in its own words; {} when the content is not such an object."""
    try:
        body = json.loads(content)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def one_line_summary(content: str, limit: int = 120) -> str:
    """A tool result as one short line for people: the error message, or the gist of the data."""
    try:
        body = json.loads(content)
    except ValueError:
        return _clip(content.replace("\n", " "), limit)
    if isinstance(body, dict) and body.get("ok") is False:
        return _clip(f"{body.get('errorCode')}: {body.get('message', '')}", limit)
    data = body.get("data") if isinstance(body, dict) else body
    if isinstance(data, dict):
        if isinstance(data.get("summary"), str) and data["summary"]:  # the tool's own gist
            return _clip(data["summary"], limit)
        for key in ("candidates", "results", "items"):
            if isinstance(data.get(key), list):
                n = len(data[key])
                return f"{n} {key if n != 1 else key.removesuffix('s')}"  # "1 candidate", "3 results"
        text = ", ".join(f"{k}={v}" for k, v in list(data.items())[:3] if not isinstance(v, dict | list))
        return _clip(text or "done", limit)
    return _clip(str(data), limit)
