"""The Slack layer, arranged by what a reader looks for (docs/architecture.md):

- ``inbound/``: what comes in from Slack — the signature gate, payload shapes, the bot's identity, Socket Mode's
  link, who may do what (access, visibility), run limits, reading a thread, work items and the worker.
- ``outbound/``: what goes out to Slack — the durable outbox, pacing, streams, Slack's API errors, Block Kit,
  the words catalog (en/zh), how a tool's result and a run's progress are said.
- one package per feature — ``alerts/``, ``followups/`` (re-checks, schedules, timers, reminders),
  ``incidents/`` (summary, handover, narrative), ``feedback/``, ``home/``, ``rollbacks/`` (the "Roll back to …" offer).
- the composition, at the top: ``app`` (the Bolt app), ``router`` (which feature a request goes to), ``render``
  (engine events → Slack), ``catchup``, ``service`` (wiring) and ``serve`` (processes).

The rule (tests/test_imports.py): outbound imports only outbound; inbound imports inbound and outbound; a
feature imports inbound, outbound and another feature only through that feature's package (what its
``__init__`` offers); only the composition imports features' modules.
"""
