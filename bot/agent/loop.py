"""The ReAct loop, step for step as in the seed article's ``reactLoop``.

    while the limits allow (shouldStop):
        Thought      one model call with the whole transcript          -> run.think()
        no calls?    that reply is the final answer                     -> run.finish()
        Action       run the batch; one observation per call id        -> run.act()   (executeBatch)
        Observation  write every result back, in call order            -> run.observe()
        asked?       the whole batch is saved first, then we pause     -> run.pause() (loop_interrupt)

A person's answer re-enters here through the same act/observe path (``Run.settle``), then the loop
continues as if the call had just returned.
"""

from __future__ import annotations

from bot.agent.outcome import RunOutcome
from bot.agent.run import Run


async def react_loop(run: Run) -> RunOutcome:
    while True:
        if (limit := run.limit_reached()) is not None:
            return await run.stop_early(limit)
        assistant = await run.think()
        if not assistant.tool_calls:
            return await run.finish("final_answer", assistant.content)
        batch = await run.act(assistant.tool_calls, stated_reason=assistant.content)
        if questions := await run.observe(batch):
            return await run.pause(questions)
