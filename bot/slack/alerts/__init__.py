"""Alerts posted by Alertmanager, Grafana or PagerDuty: ``parsing`` (any format → :class:`Alert`) and ``threads``
(investigate, hold back, fire again, resolved)."""

from bot.slack.alerts.investigations import ALERT, INVESTIGATE, Alerts
from bot.slack.alerts.parsing import Alert, parse

__all__ = ["ALERT", "INVESTIGATE", "Alert", "Alerts", "parse"]
