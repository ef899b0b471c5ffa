"""What goes out to Slack: ``outbox`` (durable, exactly once, paced), ``outgoing`` (scrubbed on the way),
``pacer``, ``streams`` and ``stream_lookup`` (chat streaming), ``landed`` (did a lost post land?), ``api_errors``
(Slack's failures classified), ``counters`` (Prometheus), ``blocks`` (Block Kit), ``words`` (the en/zh catalog),
``outputs`` (a tool's result in one line), ``progress_words``, ``markdown``, ``audit`` (a change in one line),
``people`` (names), ``thread_meta`` (what the Slack layer keeps per thread and card). Imports only outbound."""
