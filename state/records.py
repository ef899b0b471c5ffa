"""Stored records (pydantic, versioned). The transcript itself is stored as :mod:`core.messages`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, TypeAdapter, ValidationError

from core.messages import ToolCall
from core.stops import StopReason
from state.store_errors import CorruptRecord

SCHEMA_VERSION = 3
"""What this build writes. 2: a run's trace is inside its record, as rows (1 kept it in a list beside a live run);
3: a finished run's stop reason and step count only in its last row, of kind ``end``. A build reads what it and
the builds before it wrote and says so of anything newer: upgrade every worker together (docs/architecture.md)."""
READS = (1, 2, 3)

RunStatus = Literal["running", "paused", "stalled", "finished"]
"""``stalled``: its worker died; the transcript was repaired and it waits for someone to resume it."""


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


def call_environment(payload: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """Where a paused call would run, as its confirmation rule reads it (an MCP tool's rule may name another
    argument than ``environment``: its card's payload says which): what its card shows and its approvers and
    two-person rule go by."""
    found = payload["environment"] if "environment" in payload else arguments.get("environment")
    return str(found) if found else None


class PendingCall(_Record):
    """A call waiting for a person. ``arguments`` is exactly what will run if confirmed."""

    call: ToolCall
    token: str
    interrupt_type: Literal["params_required", "confirm_risky"]
    reason: str
    payload: dict[str, Any]
    arguments: dict[str, Any]
    step: int
    created_at: float
    expires_at: float

    @property
    def environment(self) -> str | None:
        return call_environment(self.payload, self.arguments)


class Ticket(_Record):
    """What a question's token opens: the pending call with its run, thread and requester, stored beside the
    token so that a click is checked (who asked, which tool, which environment) with one read."""

    run_id: str
    thread_id: str
    requester: str | None
    pending: PendingCall


class StepTrace(_Record):
    kind: Literal["step"] = "step"
    step: int
    model_latency_ms: float
    asked_for_tools: bool
    model_stop: str
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


class CallTrace(_Record):
    kind: Literal["call"] = "call"
    step: int
    call_id: str
    tool: str
    args_digest: str
    status: str
    error_code: str | None = None
    latency_ms: float


class FinishTrace(_Record):
    kind: Literal["finish"] = "finish"
    stop_reason: str
    steps: int
    active_ms: float


TraceEntry = Annotated[StepTrace | CallTrace | FinishTrace, Field(discriminator="kind")]
TraceAdapter: TypeAdapter[TraceEntry] = TypeAdapter(TraceEntry)


class RunRecord(_Record):
    schema_version: int = SCHEMA_VERSION
    run_id: str
    thread_id: str
    user_id: str | None = None
    text: str
    request_id: str | None = None
    """The front end's id of the latest message this run took (a redelivered message is recognised)."""
    first_request_id: str | None = None
    """The id of the message that started it (a reply taken later changes ``request_id``, never this)."""
    status: RunStatus = "running"
    step: int = 0
    active_ms: float = 0.0
    fail_streak: int = 0
    recent_calls: list[str] = Field(default_factory=list)
    stop_reason: StopReason | None = None
    event_seq: int = 0
    pending: list[PendingCall] = Field(default_factory=list)
    unattended: bool = False
    """Started by an alert, not by a person: every change it proposes needs a person's confirmation."""
    approvals: dict[str, str] = Field(default_factory=dict)
    """Who confirmed or declined each decided call not yet answered (call id → user), for the audit, whatever
    happens."""
    answer: str = ""
    stopped_by: str | None = None
    """Who pressed Stop, when someone did (shown with the answer, also when it is shown late)."""
    fallback: dict[str, Any] | None = None
    """The facts of an answer OpsPilot composed itself (a stop, a limit, a failure), to word it in any language
    again if it has to be shown from the record (``bot.agent.fallback.Fallback``)."""
    created_at: float
    updated_at: float
    trace: list[TraceEntry] = Field(default_factory=list)
    """Per step the model latency; per call its status and latency; the stop reason. Stored inside the record, as
    rows (:func:`dump_run`): one write per step, one key per run."""
    _rows: list[list[Any]] = PrivateAttr(default_factory=list)
    """The trace as rows so far (entries are only ever appended): a step dumps only its own."""


# --- as stored (the Redis store's encoding of a run record) ---------------------------------------------

COMMIT_ID_BYTES = 8
"""A stored run record starts with the hex id of the commit that wrote it (records written before start with
``{``): a retried commit finds it there, and no key per run holds it."""


def dump_run(run: RunRecord) -> str:
    """Compact: defaults are left out (they are restored on load), the schema version never is; the trace as rows
    (:func:`_row`). A finished run (kept a week, one per turn; issue 39 holds a thread's storage to 1.3× its
    content) starts ``{"status":"finished"`` (how ``state/scripts.py`` tells it) and leaves out what only a live run
    needs (its recent calls, for the repeated-call limit), its id (its key's), and its stop reason and step count
    (its trace's last row says them)."""
    finished = run.status == "finished"
    body = run.model_dump(mode="json", exclude_defaults=True,
                          exclude={"trace", "recent_calls", "run_id"} if finished else {"trace"})
    body["schema_version"] = SCHEMA_VERSION
    if body.get("first_request_id") == body.get("request_id"):  # (most runs take one message: no bytes for it)
        body.pop("first_request_id", None)
    if "active_ms" in body:
        body["active_ms"] = round(run.active_ms, 1)  # shown to the tenth; the clock's noise below that
    body["created_at"], body["updated_at"] = round(run.created_at, 3), round(run.updated_at, 3)  # to the ms
    rows = run._rows
    if len(rows) > len(run.trace):  # not a prefix any more (never, as entries are only appended): again
        rows.clear()
    rows.extend(_row(e) for e in run.trace[len(rows):])
    if rows:
        body["rows"] = rows
        if finished and rows[-1][:3] == ["finish", run.stop_reason, run.step]:  # "end": the record's own
            body["rows"] = [*rows[:-1], ["end", *rows[-1][1:]]]
            body.pop("stop_reason", None)
            body.pop("step", None)  # left out already when 0
    if finished:  # first, so that a script tells a finished run by its start, never by text inside it
        body = {"status": "finished", **body}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


_ROW_FIELDS = {cls.model_fields["kind"].default: [n for n in cls.model_fields if n != "kind"]
               for cls in (StepTrace, CallTrace, FinishTrace)}
"""A trace row's values, in the entry's field order (new fields go last: a shorter row leaves them default)."""


def _row(entry: TraceEntry) -> list[Any]:
    """A trace entry as ``[kind, value, …]``: its field names once in the code, not in every entry stored; trailing
    defaults left out; a call's argument digest without its tool name (it is the row's tool)."""
    body = entry.model_dump(mode="json")
    names = _ROW_FIELDS[entry.kind]
    if isinstance(entry, CallTrace):  # any other digest is marked by a leading ":" (kept whole)
        prefix = f"{entry.tool}:"
        digest = entry.args_digest
        body["args_digest"] = digest[len(prefix):] if digest.startswith(prefix) else f":{digest}"
    values = [body[n] for n in names]
    fields = type(entry).model_fields
    while values and values[-1] == fields[names[len(values) - 1]].default:
        values.pop()
    return [entry.kind, *values]


def _unrow(row: Any) -> Any:
    """The entry a row stands for, as a dict to validate (anything malformed is left for validation to name)."""
    if not isinstance(row, list) or not row or row[0] not in _ROW_FIELDS:
        return row
    body = {"kind": row[0], **dict(zip(_ROW_FIELDS[row[0]], row[1:], strict=False))}
    digest = body.get("args_digest")
    if row[0] == "call" and isinstance(digest, str):
        body["args_digest"] = digest[1:] if digest.startswith(":") else f"{body.get('tool')}:{digest}"
    return body


def parse_run(key: str, raw: str, trace: Sequence[Any] = ()) -> RunRecord:
    """``trace``: entries of a run written before its trace moved into the record (a list of JSON lines)."""
    if not raw.startswith("{"):
        raw = raw[COMMIT_ID_BYTES * 2:]
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise CorruptRecord(key, "not JSON") from exc
    version = body.get("schema_version") if isinstance(body, dict) else None
    if version not in READS:
        raise CorruptRecord(key, f"schema version {version!r}, this build reads {' and '.join(map(str, READS))}")
    if "rows" in body:  # its trace as rows (dump_run)
        rows = body.pop("rows") or []
        if not isinstance(rows, list):
            raise CorruptRecord(key, "rows: not a list")
        last = rows[-1] if rows else None
        if isinstance(last, list) and last[:1] == ["end"] and len(last) > 2:  # its stop reason and steps are ours
            body["stop_reason"], body["step"] = last[1], last[2]
            rows[-1] = ["finish", *last[1:]]
        body["trace"] = [_unrow(row) for row in rows]
    body.setdefault("run_id", key.rpartition(":run:")[2])  # a finished run's id is its key's
    body.setdefault("first_request_id", body.get("request_id"))  # kept only where they differ (dump_run)
    try:
        record = RunRecord.model_validate(body)
        record.trace.extend(TraceAdapter.validate_json(row) for row in trace)
    except ValidationError as exc:
        raise CorruptRecord(key, first_problem(exc)) from exc
    return record


def first_problem(exc: ValidationError) -> str:
    err = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"{where + ': ' if where else ''}{err['msg']}"
