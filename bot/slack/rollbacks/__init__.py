"""The "Roll back to <previous release>" offer under an answer (``offer``)."""

from bot.slack.rollbacks.offer import ROLLBACK, offer, parse, question, remember

__all__ = ["ROLLBACK", "offer", "parse", "question", "remember"]
