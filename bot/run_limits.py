"""How often runs may start (``slack.limits``): every run costs model tokens, so every way one starts — a
mention, a DM, ``/opspilot``, the message shortcut, Investigate, Re-check, a follow-up, a scheduled check — passes
a sliding window per person and one per channel (:mod:`bot.slack.inbound.run_gate`). 0 turns a window or cap off."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class RunLimits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    per_person: int = Field(6, ge=0, description="runs one person may start in any per_person_window_s")
    per_person_window_s: int = Field(60, ge=1, description="the window of per_person, in seconds")
    per_channel: int = Field(20, ge=0, description="runs that may start in one channel (or DM) in any "
                                                   "per_channel_window_s")
    per_channel_window_s: int = Field(60, ge=1, description="the window of per_channel, in seconds")
    schedule_min_interval_s: int = Field(900, ge=0, description="a schedule made with /opspilot schedule may not "
                                                               "fire more often than this (the config's own "
                                                               "schedules are the operator's: not bound)")
    schedules_per_person: int = Field(10, ge=0, description="schedules one person may keep, across all "
                                                            "channels and DMs")
    followups_per_person: int = Field(6, ge=0, description="follow-ups one person may have pending, across all "
                                                           "threads (besides 3 per thread)")


UNLIMITED = RunLimits(per_person=0, per_channel=0, schedule_min_interval_s=0, schedules_per_person=0,
                      followups_per_person=0)
"""Every window and cap off: benchmarks that start hundreds of runs on purpose, tests about something else."""
