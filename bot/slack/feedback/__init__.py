"""👍 / 👎 under an answer, the form that asks why, and what App Home lists of them (``votes``)."""

from bot.slack.feedback.votes import VIEW_ID, Feedback, home_lines, thread_url

__all__ = ["VIEW_ID", "Feedback", "home_lines", "thread_url"]
