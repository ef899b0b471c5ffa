"""App Home (``tab``): a person's questions waiting on them, recent questions and changes, 👎 answers."""

from bot.slack.home.tab import Home

__all__ = ["Home"]
