"""What comes in from Slack: ``gate`` (signatures, replays, sizes), ``shapes`` (payload models), ``identity``
(who the bot is), ``link`` (Socket Mode), ``tether`` (a worker leaves with its front), ``background`` (work after
the acknowledgement), ``access`` and ``visibility`` (who may use, confirm, read), ``run_gate`` (how often runs
start), ``thread_reader`` and ``thread_log`` (a thread's messages and events), ``work`` and ``worker`` (items a
front hands to workers, durable in Redis). Imports only inbound and outbound."""
