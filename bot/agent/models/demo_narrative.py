"""The scripted demo model's incident narrative: deterministic, from the counts the request's facts header
gives (it has no judgement to offer, and says it is the demo model)."""

from __future__ import annotations

import re

MARKER = "<incident_facts>"
"""Opens the facts of a narrative request (see :mod:`bot.slack.incidents.narrative`)."""
_COUNTS = re.compile(r"^counts: (.*)$", re.M)


def demo_narrative(content: str) -> str:
    counts = dict(p.split("=", 1) for p in (_COUNTS.search(content) or ["", ""])[1].split() if "=" in p)
    zh = counts.get("lang") == "zh"
    changes, pending = int(counts.get("changes", 0)), int(counts.get("pending", 0))
    unverified, firing = int(counts.get("unverified", 0)), counts.get("firing") == "yes"
    subject = counts.get("subject", "")
    if zh:
        impact = (f"（演示模型）受影响的服务：{subject or '未知'}。记录中有 {changes} 项变更"
                  + ("，告警仍在触发。" if firing else "。"))
        steps = [*(["- 处理等待中的确认 [E1]。"] if pending else []),
                 *(["- 人工核实未验证的变更。"] if unverified else []),
                 "- 继续观察错误率一小时" + ("，直到告警恢复。" if firing else "。"), "- 撰写事后复盘。"]
        return f"IMPACT:\n{impact}\nNEXT STEPS:\n" + "\n".join(steps)
    impact = (f"(scripted demo model) Affected: {subject or 'unknown'}. "
              f"{changes} change{'' if changes == 1 else 's'} on record"
              + ("; the alert is still firing." if firing else "."))
    steps = [*(["- Decide the pending confirmation [E1]."] if pending else []),
             *(["- Verify the unverified change by hand."] if unverified else []),
             "- Watch the error rate for an hour" + (" until the alert resolves." if firing else "."),
             "- Write the post-incident review."]
    return f"IMPACT:\n{impact}\nNEXT STEPS:\n" + "\n".join(steps)
