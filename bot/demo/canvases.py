"""The local Slack's canvases and external file uploads (a mixin of :class:`bot.demo.workspace.LocalSlack`).

Limits as Slack documents them: a canvas's ``document_content`` is ``{"type": "markdown", "markdown": …}`` of at
most 1 MiB (``canvases.create`` with ``channel_id`` tabs it in that channel; ``canvases.edit`` takes a non-empty
list of changes, each with a known operation, and answers ``canvas_not_found`` for an unknown id). An upload:
``files.getUploadURLExternal`` needs a ``filename`` and a ``length`` above 0 (``missing_argument`` otherwise;
``alt_txt`` at most 1000 characters; files at most 1 GB), the bytes are POSTed to the returned ``upload_url``,
and ``files.completeUploadExternal`` shares what was uploaded (``file_not_found`` for an id never uploaded),
posting a message with the file where ``channel_id`` / ``thread_ts`` say.

``canvases_refused``: an error code to answer every canvas call with (a workspace without canvases: the
summary's file fallback).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

MARKDOWN_MAX = 1024 * 1024
FILE_MAX = 1024 ** 3
ALT_TEXT_MAX = 1000
OPERATIONS = frozenset({"insert_at_end", "insert_at_start", "replace", "insert_after", "insert_before", "delete",
                        "rename"})


class CanvasMethods:
    canvases: dict[str, dict[str, Any]]
    uploads: dict[str, dict[str, Any]]
    canvases_refused: str | None
    messages: dict[tuple[str, str], dict[str, Any]]
    upload_base_url: str | None
    server: Any

    def _next_ts(self) -> str:
        raise NotImplementedError

    @staticmethod
    def _document(body: dict[str, Any]) -> tuple[str | None, str | None]:
        """The markdown of a ``document_content``, or the error it earns."""
        content = body.get("document_content")
        content = json.loads(content) if isinstance(content, str) else content
        if not isinstance(content, dict) or content.get("type") != "markdown" \
                or not isinstance(content.get("markdown"), str):
            return None, "invalid_arguments"
        if len(content["markdown"].encode()) > MARKDOWN_MAX:
            return None, "canvas_creation_failed"
        return content["markdown"], None

    def _canvases_create(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.canvases_refused:
            return {"ok": False, "error": self.canvases_refused}
        markdown, problem = self._document(body) if body.get("document_content") is not None else ("", None)
        if problem:
            return {"ok": False, "error": problem}
        canvas_id = f"F0CANVAS{len(self.canvases) + 1:04d}"
        self.canvases[canvas_id] = {"id": canvas_id, "title": str(body.get("title") or ""),
                                    "channel_id": body.get("channel_id"), "markdown": markdown, "edits": 0}
        return {"ok": True, "canvas_id": canvas_id}

    def _canvases_edit(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.canvases_refused:
            return {"ok": False, "error": self.canvases_refused}
        canvas = self.canvases.get(str(body.get("canvas_id") or ""))
        if canvas is None:
            return {"ok": False, "error": "canvas_not_found"}
        changes = body.get("changes")
        changes = json.loads(changes) if isinstance(changes, str) else changes
        if not isinstance(changes, list) or not changes or any(
                not isinstance(c, dict) or c.get("operation") not in OPERATIONS for c in changes):
            return {"ok": False, "error": "invalid_arguments"}
        for change in changes:
            op = change["operation"]
            if op == "rename":
                canvas["title"] = str((change.get("title_content") or {}).get("markdown") or canvas["title"])
                continue
            markdown, problem = self._document(change) if op != "delete" else ("", None)
            if problem or markdown is None:
                return {"ok": False, "error": problem or "invalid_arguments"}
            if op == "replace" and not change.get("section_id"):
                canvas["markdown"] = markdown  # no section: the whole document
            elif op in ("insert_at_end", "insert_after"):
                canvas["markdown"] += "\n" + markdown
            elif op in ("insert_at_start", "insert_before"):
                canvas["markdown"] = markdown + "\n" + canvas["markdown"]
        canvas["edits"] += 1
        return {"ok": True}

    def _files_getUploadURLExternal(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            length = int(body.get("length") or 0)
        except (TypeError, ValueError):
            return {"ok": False, "error": "invalid_arguments"}
        if not body.get("filename") or length <= 0:
            return {"ok": False, "error": "missing_argument"}
        if len(str(body.get("alt_txt") or "")) > ALT_TEXT_MAX:
            return {"ok": False, "error": "alt_txt_too_large"}
        if length > FILE_MAX:
            return {"ok": False, "error": "file_upload_size_restricted"}
        file_id = f"F0FILE{len(self.uploads) + 1:04d}"
        self.uploads[file_id] = {"id": file_id, "name": str(body["filename"]), "length": length, "content": None}
        base = self.upload_base_url or self.server.url
        return {"ok": True, "file_id": file_id, "upload_url": f"{base}/upload/{file_id}"}

    async def _upload(self, request: web.Request) -> web.Response:
        upload = self.uploads.get(request.match_info["file_id"])
        if upload is None:
            return web.Response(status=404, text="unknown upload")
        if request.content_type.startswith("multipart/"):
            form = await request.post()
            part = next(iter(form.values()), b"")
            data = part.file.read() if hasattr(part, "file") else str(part).encode()
        else:
            data = await request.read()
        upload["content"] = data
        return web.Response(status=200, text=f"OK - {len(data)}")

    def _files_completeUploadExternal(self, body: dict[str, Any]) -> dict[str, Any]:
        files = body.get("files")
        files = json.loads(files) if isinstance(files, str) else files
        if not isinstance(files, list) or not files:
            return {"ok": False, "error": "invalid_arguments"}
        shared = []
        for f in files:
            upload = self.uploads.get(str((f or {}).get("id") or ""))
            if upload is None or upload["content"] is None:
                return {"ok": False, "error": "file_not_found"}
            upload["title"] = str(f.get("title") or upload["name"])
            shared.append({"id": upload["id"], "name": upload["name"], "title": upload["title"],
                           "size": len(upload["content"])})
        channel, thread_ts = body.get("channel_id"), body.get("thread_ts")
        if thread_ts and not channel:
            return {"ok": False, "error": "invalid_arguments"}
        if channel:
            ts = self._next_ts()
            self.messages[(str(channel), ts)] = {
                "ts": ts, "channel": str(channel), "text": str(body.get("initial_comment") or ""), "bot": True,
                "user": "UBOT", "thread_ts": thread_ts, "blocks": [], "files": shared, "edits": 0}
            for f in shared:
                self.uploads[f["id"]]["shared_in"] = (str(channel), ts)
        return {"ok": True, "files": shared}

    def canvas_routes(self) -> list[web.RouteDef]:
        return [web.post("/upload/{file_id}", self._upload)]
