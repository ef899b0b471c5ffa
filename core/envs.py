"""One spelling of an environment name, for every place that compares one: the gate (``confirm_in``), the
approvers and two-person rules, cards and audits. ``"prod "`` or ``"PROD"`` must not be judged as a place no rule
names, and a Cyrillic ``р`` or a zero-width space must not make ``prod`` look like something else."""

from __future__ import annotations


def environment_name(value: str) -> str | None:
    """``value`` stripped and case-folded; None when it holds anything but printable ASCII (a look-alike letter,
    an invisible or control character), which no rule could be meant to match."""
    name = value.strip()
    if not all(" " <= c <= "~" for c in name):
        return None
    return name.casefold()

