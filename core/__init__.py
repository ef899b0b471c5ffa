"""The vocabulary every layer shares: the conversation's messages (tool calls and their results)
and why a run stops. Nothing here imports ``bot``, ``tools`` or ``state``; they all import this."""
