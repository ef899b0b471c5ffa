"""Where things are in Slack, kept in the front end's metadata store (each a small hash with the thread's TTL).

    slack-thread  engine thread id → channel, thread_ts           (written when a conversation starts)
    slack-run     run id → the model that answered (feedback); its rendered state until issue 39 (now saved
                  beside the thread's outbox, ``Keys.outbox_state``: read here for runs paused before)
    slack-card    question token → channel, ts of its card, summary, decided (the final wording, once)
"""

from __future__ import annotations

THREAD, RUN, CARD = "slack-thread", "slack-run", "slack-card"


def thread_key(channel: str, thread_ts: str) -> str:
    """The engine's thread id for a Slack thread."""
    return f"slack:{channel}:{thread_ts}"


def channel_of(thread_id: str) -> str:
    """The Slack channel of an engine thread id ("" for a thread that is not Slack's)."""
    kind, _, rest = thread_id.partition(":")
    return rest.partition(":")[0] if kind == "slack" else ""
