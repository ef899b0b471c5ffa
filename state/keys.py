"""Every Redis key OpsPilot uses, built here and nowhere else, each with its TTL."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Ttls:
    thread_s: int = 7 * 24 * 3600
    """Transcript, the thread's current run, runs, traces and journals."""
    interrupt_s: int = 30 * 60
    """How long a question to a person stays answerable."""
    claim_margin_s: int = 24 * 3600
    """Tokens and claims outlive their interrupt, so a late click learns what happened."""
    cancel_s: int = 3600
    dedupe_s: int = 24 * 3600
    stats_s: int = 8 * 24 * 3600
    audit_s: int = 90 * 24 * 3600
    audit_max_entries: int = 100_000


@dataclass(frozen=True)
class Keys:
    prefix: str = "opspilot"

    def transcript(self, thread_id: str) -> str:
        return f"{self.prefix}:thread:{thread_id}:transcript"

    def thread_run(self, thread_id: str) -> str:
        return f"{self.prefix}:thread:{thread_id}:run"

    def lease(self, thread_id: str) -> str:
        return f"{self.prefix}:thread:{thread_id}:lease"

    def run(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}"

    def journal(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}:journal"

    def last_commit(self, run_id: str) -> str:
        """The id of the run's last applied commit, so a commit retried after a lost reply applies once."""
        return f"{self.prefix}:run:{run_id}:commit"

    def cancel(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}:cancel"

    def token(self, token: str) -> str:
        """The ticket a question's token opens (see :class:`state.records.Ticket`)."""
        return f"{self.prefix}:token:{token}"

    def claim(self, token: str) -> str:
        return f"{self.prefix}:claim:{token}"

    def once(self, name: str) -> str:
        """Once-per-tick markers (sweeps)."""
        return f"{self.prefix}:once:{name}"

    def dedupe(self, name: str) -> str:
        return f"{self.prefix}:dedupe:{name}"

    def stats(self, hour: int) -> str:
        return f"{self.prefix}:stats:{hour}"

    def meta(self, kind: str, name: str) -> str:
        """Front-end bookkeeping (e.g. where a thread's Slack progress message is)."""
        return f"{self.prefix}:meta:{kind}:{name}"

    def paused_index(self) -> str:
        """Paused runs scored by their earliest question expiry (for expiry and reminders)."""
        return f"{self.prefix}:index:paused"

    def active_index(self) -> str:
        """Running runs scored by their last write (for finding runs whose worker died)."""
        return f"{self.prefix}:index:active"

    def outbox(self, thread: str) -> str:
        """One front-end conversation thread's undelivered and delivered messages (a hash of records)."""
        return f"{self.prefix}:outbox:{thread}"

    def outbox_due(self) -> str:
        """Threads with something to deliver, scored by their next attempt."""
        return f"{self.prefix}:outbox-due"

    def outbox_lease(self, thread: str) -> str:
        """Who delivers a thread's messages right now (one deliverer at a time keeps them in order)."""
        return f"{self.prefix}:outbox-lease:{thread}"

    def queue(self) -> str:
        """The work stream fronts add to and workers read (one consumer group)."""
        return f"{self.prefix}:work"

    def audit(self) -> str:
        return f"{self.prefix}:audit"
