"""What the person at the terminal types: lines read on the event loop, and Ctrl-C as an event.

A line is read when stdin is readable, never by a thread blocked in ``readline``: such a thread outlives a Ctrl-C
(the process then waits for one more key before it can exit). Ctrl-C while a line is awaited ends that wait
with :class:`Interrupted`; at any other time it calls ``on_interrupt`` — the conversation decides what it means.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from typing import TextIO


class Interrupted(Exception):
    """Ctrl-C while a line was awaited."""


class Keyboard:
    def __init__(self, stream: TextIO) -> None:
        self._fd = stream.fileno()
        self._buffer = bytearray()
        self._ended = False
        self._waiter: asyncio.Future[None] | None = None
        self._pollable = True  # a pipe or terminal; a regular file (or /dev/null) is always ready instead
        self.on_interrupt: Callable[[], None] = lambda: None

    def start(self) -> None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, self._interrupt)

    def stop(self) -> None:
        asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)

    async def line(self) -> str | None:
        """The next line, without its newline; None once input has ended. Raises :class:`Interrupted`."""
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                raw = bytes(self._buffer[:end])
                del self._buffer[:end + 1]
                return raw.decode("utf-8", "replace")
            if self._ended:
                if not self._buffer:
                    return None
                raw, self._buffer = bytes(self._buffer), bytearray()
                return raw.decode("utf-8", "replace")
            await self._fill()

    async def _fill(self) -> None:
        loop = asyncio.get_running_loop()
        if self._pollable:
            self._waiter = loop.create_future()
            try:
                loop.add_reader(self._fd, self._ready)
            except (OSError, ValueError):  # epoll takes no regular file: reading one never blocks
                self._pollable = False
            else:
                try:
                    await self._waiter
                finally:
                    loop.remove_reader(self._fd)
            self._waiter = None
        chunk = os.read(self._fd, 65536)  # readable: returns at once (a terminal: once a line is complete)
        if chunk:
            self._buffer += chunk
        else:
            self._ended = True

    def _ready(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _interrupt(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(Interrupted())
        else:
            self.on_interrupt()
