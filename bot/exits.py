"""The exit codes every ``opspilot`` subcommand uses (the table in docs/configuration.md): an init container, a
CI gate or systemd can tell "fix the config" from "wait for a dependency" without reading the output."""

OK = 0
"""Done; for ``check``: ready."""
FAILED = 1
"""``check``: not ready (a required check failed); ``eval``: below ``--min-pass``; ``report``: no such thread;
a failure while running."""
CONFIG = 2
"""Usage or configuration: bad arguments, an invalid config, a value ``serve`` refuses, a credential refused."""
UNAVAILABLE = 3
"""Unavailable at start: a port in use, Redis not reachable. Retrying later may work without changing anything."""
INTERRUPTED = 130
"""Ctrl-C."""
