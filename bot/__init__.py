"""OpsPilot: a Slack ops assistant built on a ReAct run engine."""
