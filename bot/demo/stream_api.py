"""The local Slack's streaming methods: ``chat.startStream`` / ``appendStream`` / ``stopStream`` and
``assistant.threads.setStatus``, with the rules a real workspace enforces.

A streamed message keeps its parts apart (``message["stream"]``: the tasks by id, the plan's title,
the markdown text, whether it still streams), so tests and the demo page can see what a person sees:
task cards that change state in place, text that grows, blocks added at the end. A stream ends when
stopped or when nothing was appended for ``stream_timeout_s`` (Slack: a few minutes); after that an
append or a stop gets ``message_not_in_streaming_state``, and ``chat.update`` may replace its content.
"""

from __future__ import annotations

import time
from typing import Any

from bot.demo.block_limits import block_problems

STREAM_METHODS = frozenset({"chat.startStream", "chat.appendStream", "chat.stopStream"})
TASK_STATUSES = frozenset({"pending", "in_progress", "complete", "error"})
MARKDOWN_LIMIT = 12_000
TASK_OUTPUT_LIMIT = 256
# Slack's rate tiers for these methods, per minute (startStream/stopStream Tier 2, appendStream Tier 4).
TIERS = {"chat.startStream": 20, "chat.stopStream": 20, "chat.appendStream": 100, "assistant.threads.setStatus": 50}


def _chunk_problem(chunk: Any) -> str | None:
    if not isinstance(chunk, dict):
        return "invalid_chunks: a chunk must be an object"
    kind = chunk.get("type")
    if kind == "markdown_text":
        return None if isinstance(chunk.get("text"), str) else "invalid_chunks: markdown_text needs text"
    if kind == "plan_update":
        return None if str(chunk.get("title") or "").strip() else "invalid_chunks: plan_update needs a title"
    if kind == "blocks":
        problems = block_problems(chunk.get("blocks") or [])
        return "invalid_blocks: " + "; ".join(problems) if problems else None
    if kind == "task_update":
        if not chunk.get("id") or not str(chunk.get("title") or "").strip():
            return "invalid_chunks: task_update needs an id and a title"
        if chunk.get("status") not in TASK_STATUSES:
            return f"invalid_chunks: task_update status {chunk.get('status')!r} is not one of {sorted(TASK_STATUSES)}"
        if len(str(chunk.get("output") or "")) > TASK_OUTPUT_LIMIT:
            return f"invalid_chunks: task_update output must be at most {TASK_OUTPUT_LIMIT} characters"
        return None
    return f"invalid_chunks: unknown chunk type {kind!r}"


class StreamMethods:
    """Mixed into the local Slack (which owns ``messages`` and the clock)."""

    messages: dict[tuple[str, str], dict[str, Any]]
    stream_timeout_s: float
    streams_supported: bool
    members: dict[str, set[str]]
    statuses: dict[tuple[str, str], str]
    status_log: list[tuple[str, str, str]]
    bot_user: str | None
    streams_started: list[dict[str, Any]]
    """Every message a ``chat.startStream`` created, in order (deleted ones too): what a test checks was stopped."""

    def unstopped_streams(self) -> list[dict[str, Any]]:
        """Streams started and never ended by ``chat.stopStream`` (still streaming, or ended by the timeout)."""
        return [m for m in self.streams_started
                if (m["stream"]["state"] if "stream" in m else m.get("was_stream")) != "stopped"]

    def _next_ts(self) -> str:
        raise NotImplementedError

    def stream_problem(self, method: str, body: dict[str, Any], team: str) -> str | None:
        """Why Slack would refuse this streaming call, or None."""
        chunks = body.get("chunks") or []
        if not isinstance(chunks, list):
            return "invalid_arguments: chunks must be an array"
        for chunk in chunks:
            problem = _chunk_problem(chunk)
            if problem:
                return problem
        text = len(str(body.get("markdown_text") or "")) + sum(
            len(str(c.get("text") or "")) for c in chunks if c.get("type") == "markdown_text")
        if text > MARKDOWN_LIMIT:
            return "msg_too_long"
        channel = str(body.get("channel") or "")
        if method == "chat.startStream":
            thread_ts = str(body.get("thread_ts") or "")
            if (channel, thread_ts) not in self.messages:
                return "invalid_arguments: thread_ts must be a message in the channel"
            if not channel.startswith("D"):  # outside a DM the stream is for one person
                user, their_team = body.get("recipient_user_id"), body.get("recipient_team_id")
                if not user or not their_team:
                    return "invalid_arguments: recipient_user_id and recipient_team_id are required in channels"
                if their_team != team:
                    return "team_not_found"
                if channel in self.members and user not in self.members[channel]:
                    return "user_not_in_channel"
            if body.get("task_display_mode") not in (None, "timeline", "plan"):
                return "invalid_arguments: task_display_mode is timeline or plan"
            return None
        message = self.messages.get((channel, str(body.get("ts") or "")))
        if message is None:
            return "message_not_found"
        if not self._streaming(message):
            return "message_not_in_streaming_state"
        if method == "chat.stopStream" and body.get("blocks"):
            problems = block_problems(body["blocks"])
            if problems:
                return "invalid_blocks: " + "; ".join(problems)
        return None

    def _streaming(self, message: dict[str, Any]) -> bool:
        stream = message.get("stream")
        if not stream or stream["state"] != "streaming":
            return False
        if time.monotonic() - stream["touched"] > self.stream_timeout_s:
            stream["state"] = "timed_out"  # Slack ends a stream nobody appends to
            return False
        return True

    def _apply(self, message: dict[str, Any], body: dict[str, Any]) -> None:
        stream = message["stream"]
        stream["touched"] = time.monotonic()
        pieces = [{"type": "markdown_text", "text": body["markdown_text"]}] if body.get("markdown_text") else []
        for chunk in [*pieces, *(body.get("chunks") or [])]:
            kind = chunk["type"]
            if kind == "markdown_text":
                stream["markdown"] += chunk["text"]
                message["text"] = stream["markdown"]
            elif kind == "plan_update":
                stream["plan"] = chunk["title"]
            elif kind == "blocks":
                message["blocks"] = [*message["blocks"], *chunk["blocks"]]
            else:  # a task card changes in place: same id, new state
                task = {k: chunk[k] for k in ("id", "title", "status", "details", "output") if k in chunk}
                known = next((t for t in stream["tasks"] if t["id"] == task["id"]), None)
                if known is None:
                    stream["tasks"].append(task)
                else:
                    known.update(task)
            stream["chunks"] += 1

    def _chat_startStream(self, body: dict[str, Any]) -> dict[str, Any]:
        ts, channel = self._next_ts(), str(body["channel"])
        message: dict[str, Any] = {
            "ts": ts, "channel": channel, "thread_ts": body.get("thread_ts"), "text": "", "blocks": [], "bot": True,
            "user": self.bot_user or "UBOT", "bot_id": "B0001", "edits": 0,
            "stream": {"state": "streaming", "mode": body.get("task_display_mode") or "timeline",
                       "recipient": body.get("recipient_user_id"), "plan": "", "tasks": [], "markdown": "",
                       "chunks": 0, "touched": time.monotonic()}}
        self.messages[(channel, ts)] = message
        self.streams_started.append(message)
        self._apply(message, body)
        self.statuses.pop((channel, str(body.get("thread_ts"))), None)  # the app replied: the status clears
        return {"ok": True, "channel": channel, "ts": ts}

    def _chat_appendStream(self, body: dict[str, Any]) -> dict[str, Any]:
        message = self.messages[(str(body["channel"]), str(body["ts"]))]
        self._apply(message, body)
        return {"ok": True, "channel": body["channel"], "ts": body["ts"]}

    def _chat_stopStream(self, body: dict[str, Any]) -> dict[str, Any]:
        message = self.messages[(str(body["channel"]), str(body["ts"]))]
        self._apply(message, body)
        message["blocks"] = [*message["blocks"], *(body.get("blocks") or [])]
        if body.get("metadata"):
            message["metadata"] = body["metadata"]
        message["stream"]["state"] = "stopped"
        return {"ok": True, "channel": body["channel"], "ts": body["ts"], "message": message}

    def _assistant_threads_setStatus(self, body: dict[str, Any]) -> dict[str, Any]:
        channel, thread_ts = str(body.get("channel_id") or ""), str(body.get("thread_ts") or "")
        if (channel, thread_ts) not in self.messages:
            return {"ok": False, "error": "invalid_arguments"}
        status = str(body.get("status") or "")
        self.status_log.append((channel, thread_ts, status))
        if status:
            self.statuses[(channel, thread_ts)] = status
        else:
            self.statuses.pop((channel, thread_ts), None)
        return {"ok": True}
