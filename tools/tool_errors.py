"""What a tool can say instead of a result.

Two families, drawn apart on purpose::

    ToolError                      the call failed; the model reads {"ok": false, "errorCode", "message"}
    ├── InvalidArguments           validation_error   (bad or missing arguments)
    ├── NotFound                   not_found
    ├── ToolTimeout                timeout
    ├── UpstreamError              upstream_error     (backend unreachable or 5xx)
    ├── PermissionDenied           permission_denied
    ├── Conflict                   conflict           (the target changed since the card was shown)
    └── Refused                    paused, no_change, out_of_bounds… (a change that must not be made as asked)

    Interrupt                      not a failure: the run pauses and a person is asked
    ├── ParamsRequired             params_required    (missing fields, with their choices)
    └── ConfirmRisky               confirm_risky      (raised by the runtime's gate, not by tools)

Anything else a tool raises is logged with its stack trace for the operator and
reaches the model only as ``internal_error`` with a reference id.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal


class ToolError(Exception):
    """A tool failure the model should see as an observation."""

    code: ClassVar[str] = "tool_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code  # type: ignore[misc]  # per-instance override of the class default


class InvalidArguments(ToolError):
    code = "validation_error"


class NotFound(ToolError):
    code = "not_found"


class ToolTimeout(ToolError):
    code = "timeout"


class UpstreamError(ToolError):
    code = "upstream_error"


class Unreachable(UpstreamError):
    """No connection was made: nothing was sent (a change's request certainly did not land)."""


class Throttled(UpstreamError):
    """Refused for now (HTTP 429): nothing was done; try again later."""


class OutcomeUnknown(ToolError):
    """A change was sent and its answer was lost or unreadable: it may or may not have been carried out."""

    code = "outcome_unknown"


class PermissionDenied(ToolError):
    code = "permission_denied"


class Conflict(ToolError):
    code = "conflict"


class Refused(ToolError):
    """A change refused before it is made; its code says why (``paused``, ``no_change``, ``out_of_bounds``)."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message, code=code)


InterruptType = Literal["params_required", "confirm_risky"]


class Interrupt(Exception):
    """Ask a person before this call can produce a result."""

    interrupt_type: ClassVar[InterruptType]

    def __init__(self, reason: str, payload: dict[str, Any]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.payload = payload


class ParamsRequired(Interrupt):
    """Raise from a tool when fields are missing; ``fields`` maps each name to its choices (or None)."""

    interrupt_type = "params_required"

    def __init__(self, reason: str, fields: dict[str, list[str] | None]) -> None:
        payload = {
            "fields": [{"name": name, "choices": choices} for name, choices in fields.items()],
        }
        super().__init__(reason, payload)
        self.fields = fields


class ConfirmRisky(Interrupt):
    interrupt_type = "confirm_risky"
