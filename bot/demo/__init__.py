"""A local Slack-like workspace in the browser: `opspilot demo`."""
