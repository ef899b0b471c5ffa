"""An incident's record from its thread: ``incident`` (gathered from the run records), ``document`` (the
summary's Markdown), ``narrative`` (the model's part), ``canvas`` (posted as a canvas or a file), ``handover``
and ``commands`` (summarize, handover)."""
