"""The ReAct loop, step for step as in the seed article's ``reactLoop``.

    while the limits allow (shouldStop):
        Thought      one model call with the whole transcript          -> run.think()
        no calls?    that reply is the final answer                     -> run.finish()
        Action       run the batch; one observation per call id        -> run.act()   (executeBatch)
        Observation  write every result back, in call order            -> run.observe()
        asked?       the whole batch is saved first, then we pause     -> run.pause() (loop_interrupt)

``first_tool`` makes the first step a serial step (``serialStep``): the model sees
only that tool and must call it; any other call it still makes is answered
``skipped_in_serial_step``.
"""

from __future__ import annotations

from bot.agent.run import Run, RunOutcome


async def react_loop(run: Run, *, first_tool: str | None = None) -> RunOutcome:
    serial = first_tool
    while True:
        if (limit := run.limit_reached()) is not None:
            return await run.stop_early(limit)
        assistant = await run.think(only=serial)
        if not assistant.tool_calls:
            return await run.finish("final_answer", assistant.content)
        observations = await run.act(assistant, allowed={serial} if serial else None)
        await run.observe(observations)
        if run.record.pending:
            return await run.pause()
        serial = None
