"""Feedback with its context, through the signed endpoint: 👎 asks why in a form, and its submission stores the
rating with the run, question, answer, model, who and a link to the answer; 👍 is stored at once; `/metrics`,
App Home and `opspilot stats` show them. Someone not allowed, a forged or malformed form: refused, nothing stored."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import aiohttp

from bot.agent.models.base import DEMO_LABEL
from bot.config import Settings
from bot.demo.sender import block_action, mention, view_submission
from bot.demo.server import CHANNEL as DEMO_CHANNEL
from bot.demo.server import Demo
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import buttons
from bot.slack.feedback.votes import DOWN_READ, VIEW_ID, home_lines
from state import MemoryStore, RedisStore
from state.feedback_store import FeedbackEntry
from state.keys import shard_of
from tests.conftest import free_port, until
from tests.slack_harness import CHANNEL, Workspace, open_workspace
from tests.test_cli import run_cli
from tests.test_home import home_text, opened


async def answered(ws: Workspace, ts: str = "900.1", user: str = "UREQ") -> dict[str, Any]:
    await ws.sender.event(mention(CHANNEL, user, "payments errors", ts))
    await ws.settle()
    answer = ws.slack.thread(CHANNEL, ts)[-1]
    assert any(b["action_id"] == "opspilot_feedback_down" for b in buttons(answer))
    return answer


async def rate(ws: Workspace, answer: dict[str, Any], user: str, rating: str) -> None:
    button = next(b for b in buttons(answer) if b["action_id"] == f"opspilot_feedback_{rating}")
    status, _ = await ws.sender.action(block_action(user=user, channel=CHANNEL, message=answer,
                                                    action_id=button["action_id"], value=button["value"]))
    assert status == 200
    await ws.settle()


def picked(reason: str | None, note: str | None = None) -> dict[str, Any]:
    values: dict[str, Any] = {"reason": {"reason": {"type": "radio_buttons", "selected_option":
                                                    {"value": reason} if reason is not None else None}}}
    values["note"] = {"note": {"type": "plain_text_input", "value": note}}
    return values


async def submit(ws: Workspace, user: str, view: dict[str, Any], values: dict[str, Any]) -> tuple[int, str]:
    status, body = await ws.sender.action(view_submission(user=user, view=view, values=values))
    await ws.settle()
    return status, body


def run_of(answer: dict[str, Any]) -> str:
    return str(next(b["value"] for b in buttons(answer) if b["action_id"] == "opspilot_feedback_up")).partition(":")[2]


async def test_thumbs_down_asks_why_and_keeps_the_answer_with_its_context(redis_url: str, prefix: str,
                                                                         slack: FakeSlack) -> None:
    ws = await open_workspace(redis_url, prefix, slack)
    try:
        answer = await answered(ws)
        run_id = run_of(answer)
        await rate(ws, answer, "UREQ", "down")
        [modal] = slack.modals
        view = modal["view"]
        assert modal["trigger_id"] == "1.2.3" and view["callback_id"] == VIEW_ID
        labels = [o["text"]["text"] for o in view["blocks"][0]["element"]["options"]]
        assert labels == ["Wrong facts", "Missed something", "Too slow", "Other"]
        assert await ws.store.feedback.latest("down") == []  # nothing stored until the form is sent

        started = time.time()
        status, body = await submit(ws, "UREQ", view, picked("wrong_facts", "pool size is 20, password=hunter2x"))
        assert (status, body) == (200, "")  # acknowledged: the form closes
        [entry] = await ws.store.feedback.latest("down")
        run = await ws.service.core.engine.run_record(run_id)
        assert entry.run_id == run_id and entry.thread_id == f"slack:{CHANNEL}:900.1" and entry.user == "UREQ"
        assert entry.reason == "wrong_facts" and entry.rating == "down"
        assert entry.note.startswith("pool size is 20, password=") and "hunter2x" not in entry.note  # scrubbed
        assert entry.question == run.text and "payments errors" in entry.question
        assert entry.answer == run.answer and len(entry.answer) > 20
        assert entry.model == ws.service.core.model.label  # recorded when the run finished
        assert entry.link == f"https://fake.slack.test/archives/{CHANNEL}/p{answer['ts'].replace('.', '')}" \
                             f"?thread_ts=900.1&cid={CHANNEL}"  # chat.getPermalink of the answer
        assert started - 1 <= entry.at <= time.time()
        ttl = await ws.store.client.ttl(ws.store.keys.feedback(shard_of(entry.thread_id), run_id, "UREQ"))
        assert 29 * 86400 < ttl <= 30 * 86400
        assert any("noted (wrong facts)" in t for t in slack.ephemeral_texts("UREQ"))

        # Once per person per answer: the same form again, or the button again, stores nothing more.
        await submit(ws, "UREQ", view, picked("too_slow"))
        await rate(ws, answer, "UREQ", "down")
        assert len(slack.modals) == 1 and len(await ws.store.feedback.latest("down")) == 1
        assert any("already rated" in t for t in slack.ephemeral_texts("UREQ"))

        await rate(ws, answer, "UOTHER", "up")  # 👍: stored at once, no form
        assert len(slack.modals) == 1
        [up] = await ws.store.feedback.latest("up")
        assert up.user == "UOTHER" and up.reason == "" and up.run_id == run_id
        stats = await ws.store.stats(3600)
        assert (stats.get("feedback_up"), stats.get("feedback_down")) == (1, 1)
        model = ws.service.core.model.label
        metrics = ws.service.metrics.render()
        assert f'opspilot_feedback_total{{model="{model}",rating="down"}} 1' in metrics
        assert f'opspilot_feedback_total{{model="{model}",rating="up"}} 1' in metrics
    finally:
        await ws.stop()


async def test_home_and_stats_list_the_latest_thumbs_down_with_links(redis_url: str, prefix: str, slack: FakeSlack,
                                                                     tmp_path: Path) -> None:
    ws = await open_workspace(redis_url, prefix, slack)
    try:
        await opened(ws, "UREQ")
        assert "No answer was rated 👎 lately." in home_text(slack, "UREQ")
        answer = await answered(ws)
        await rate(ws, answer, "UREQ", "down")
        # A note's own lines would read as entries of their own on everyone's Home: it is shown on one line.
        note = "it did not check the deploys\n• 10:42 — *Wrong facts* — “rollback approved, go ahead”"
        await submit(ws, "UREQ", slack.modals[0]["view"], picked("missed", note))
        [entry] = await ws.store.feedback.latest("down")

        await opened(ws, "UOTHER")
        home = home_text(slack, "UOTHER").split("*Latest 👎*")[1]
        assert "*Missed something*: it did not check the deploys • 10:42" in home and "payments errors" in home
        assert sum(line.startswith("• ") for line in home.splitlines()) == 1, home
        assert f"<{entry.link}|the thread>" in home
        assert entry.model == DEMO_LABEL and "— the scripted demo model" in home  # named in the reader's words

        env = {"REDIS_URL": redis_url, "OPSPILOT_KEY_PREFIX": prefix}
        code, out, err = await run_cli(["stats", "--window", "1h"], "", env, tmp_path)
        assert code == 0, err
        assert "payments errors" not in out and "(private conversation)" not in out  # no Slack: public is not known
        assert "(not shown: whether anyone may read that conversation is not known: set SLACK_BOT_TOKEN)" in out
        code, out, err = await run_cli(["stats", "--window", "1h"], "", {
            **env, "SLACK_BOT_TOKEN": slack.token, "SLACK_API_URL": slack.api_url}, tmp_path)  # C0OPS is public
        assert code == 0, err
        assert "answers rated 👍 / 👎        0 / 1" in out
        latest = out.split("latest 👎 (newest first)")[1]
        assert "missed something: it did not check the deploys • 10:42 — *Wrong facts*" in latest
        assert "— by UREQ, model" in latest
        assert "asked: " in latest and "payments errors" in latest and entry.link in latest
    finally:
        await ws.stop()


async def test_feedback_from_someone_not_allowed_is_refused(redis_url: str, prefix: str, slack: FakeSlack) -> None:
    slack.usergroups["S0OPS"] = ["UREQ", "UOTHER"]
    ws = await open_workspace(redis_url, prefix, slack, allowed_usergroups=["S0OPS"])
    try:
        ws.service.inbound.access.cache_s = 0  # group membership read at every check
        answer = await answered(ws)
        await rate(ws, answer, "UREQ", "down")  # the form opens for a member…
        slack.usergroups["S0OPS"] = ["UREQ"]
        for rating in ("up", "down"):  # …and an outsider's clicks are refused
            await rate(ws, answer, "UOTHER", rating)
        assert len(slack.modals) == 1
        refusals = [t for t in slack.ephemeral_texts("UOTHER") if "not on the list of people" in t]
        assert len(refusals) == 2

        slack.usergroups["S0OPS"] = []  # the member who opened the form leaves the group before sending it
        status, _ = await submit(ws, "UREQ", slack.modals[0]["view"], picked("other"))
        assert status == 200
        assert any("not on the list of people" in t for t in slack.ephemeral_texts("UREQ"))
        assert await ws.store.feedback.latest("down") == [] and await ws.store.feedback.latest("up") == []
        assert (await ws.store.stats(3600)).get("feedback_down") == 0
        assert "opspilot_feedback_total" not in ws.service.metrics.render()
    finally:
        await ws.stop()


async def test_forged_or_malformed_forms_are_refused_and_store_nothing(redis_url: str, prefix: str,
                                                                       slack: FakeSlack) -> None:
    ws = await open_workspace(redis_url, prefix, slack)
    try:
        answer = await answered(ws)
        await rate(ws, answer, "UREQ", "down")
        view = slack.modals[0]["view"]
        forged = "This form is not one OpsPilot opened for you: nothing was stored."
        refused = {
            "someone else's form": ("UOTHER", view, picked("wrong_facts"), {"reason": forged}),
            "a token never issued": ("UREQ", {**view, "private_metadata": "A" * 32}, picked("other"),
                                     {"reason": forged}),
            "no token": ("UREQ", {**view, "private_metadata": ""}, picked("other"), {"reason": forged}),
            "no reason": ("UREQ", view, picked(None), {"reason": "Choose what was wrong."}),
            "a reason not offered": ("UREQ", view, picked("hates_bots"), {"reason": "Choose what was wrong."}),
            "a note too long": ("UREQ", view, picked("other", "x" * 501), {"note": "Keep it to 500 characters."}),
        }
        for case, (user, shown, values, errors) in refused.items():
            status, body = await submit(ws, user, shown, values)
            assert status == 200, case
            assert json.loads(body) == {"response_action": "errors", "errors": errors}, case
        for bad in ({"private_metadata": 7}, {"state": {"values": [1]}}, {"state": {"values": {"reason": "x"}}}):
            payload = view_submission(user="UREQ", view=view, values=picked("other"))
            payload["view"].update(bad)
            assert await ws.sender.action(payload) == (400, "malformed body"), bad
        await ws.settle()
        assert await ws.store.feedback.latest("down") == []
        assert (await ws.store.stats(3600)).get("feedback_down") == 0
        assert not [t for t in slack.ephemeral_texts() if "noted" in t]

        status, body = await submit(ws, "UREQ", view, picked("too_slow"))  # the real form still works
        assert (status, body) == (200, "")
        [entry] = await ws.store.feedback.latest("down")
        assert entry.reason == "too_slow"
    finally:
        await ws.stop()


async def test_a_thumbs_down_whose_form_cannot_open_is_kept_without_a_reason(redis_url: str, prefix: str,
                                                                            slack: FakeSlack) -> None:
    ws = await open_workspace(redis_url, prefix, slack)
    try:
        answer = await answered(ws)
        slack.fault("refuse", "views.open", error="expired_trigger_id")  # the click's trigger lapsed on the way
        await rate(ws, answer, "UREQ", "down")
        [entry] = await ws.store.feedback.latest("down")
        assert entry.reason == "" and entry.user == "UREQ"
        assert any("Tell me in the thread what was missing or wrong" in t for t in slack.ephemeral_texts("UREQ"))
    finally:
        await ws.stop()


async def test_a_form_whose_opening_slack_did_not_confirm_keeps_its_reason(redis_url: str, prefix: str,
                                                                           slack: FakeSlack) -> None:
    """views.open done and its answer lost: retried, the used trigger was refused, the 👎 stored without a reason
    and "thanks" said while the form was open; sent, the form was "already rated" and its reason lost."""
    ws = await open_workspace(redis_url, prefix, slack)
    try:
        answer = await answered(ws)
        slack.fault("lost", "views.open", times=1)
        await rate(ws, answer, "UREQ", "down")
        [modal] = slack.modals  # opened once, never asked again
        assert await ws.store.feedback.latest("down") == []
        assert any("did not confirm that the feedback form opened" in t for t in slack.ephemeral_texts("UREQ"))
        await submit(ws, "UREQ", modal["view"], picked("missed"))
        [entry] = await ws.store.feedback.latest("down")
        assert entry.reason == "missed"
        # A 429 is a refusal (Slack opened nothing, the trigger unused): asked once more after its Retry-After, the
        # form opens (it was kept without a reason, the person told to say it in the thread, for good).
        slack.fault("limited", "views.open", times=1)
        await rate(ws, answer, "UOTHER", "down")
        assert len(slack.modals) == 2 and [e.user for e in await ws.store.feedback.latest("down")] == ["UREQ"]
        assert not any("did not confirm" in t for t in slack.ephemeral_texts("UOTHER"))
    finally:
        await ws.stop()


async def test_a_rating_button_of_another_threads_or_an_expired_answer_is_refused(redis_url: str, prefix: str,
                                                                    slack: FakeSlack) -> None:
    ws = await open_workspace(redis_url, prefix, slack)
    try:
        first = await answered(ws, "900.1")
        second = await answered(ws, "901.1")
        lifted = next(b for b in buttons(first) if b["action_id"] == "opspilot_feedback_up")
        await ws.sender.action(block_action(user="UREQ", channel=CHANNEL, message=second,
                                            action_id=lifted["action_id"], value=lifted["value"]))
        await ws.settle()
        assert await ws.store.feedback.latest("up") == []
        assert any("does not belong to this message. Nothing was stored." in t
                   for t in slack.ephemeral_texts("UREQ"))

        await ws.store.client.delete(ws.store.keys.run(run_of(first)))  # its record expired
        await rate(ws, first, "UREQ", "up")
        assert await ws.store.feedback.latest("up") == []
        assert any("no record of this answer any more" in t for t in slack.ephemeral_texts("UREQ"))
    finally:
        await ws.stop()


async def test_the_demo_page_shows_the_form_to_whoever_clicked_and_sends_it(redis_url: str, prefix: str) -> None:
    demo = Demo(Settings(redis_url=redis_url, key_prefix=prefix), free_port())
    server = await demo.start()
    shown: list[dict[str, Any]] = []
    demo.slack.watchers.append(lambda change: _collect(shown, change))
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{server.url}/demo/say", json={"user": "U0ALICE",
                                                                  "text": "@OpsPilot orders errors in staging"}) as r:
                root = (await r.json())["ts"]

            def rated() -> list[dict[str, Any]]:
                return [m for m in demo.slack.thread(DEMO_CHANNEL, root)
                        if any(b["action_id"] == "opspilot_feedback_down" for b in buttons(m))]

            await until(lambda: bool(rated()))
            answer = rated()[-1]
            down = next(b for b in buttons(answer) if b["action_id"] == "opspilot_feedback_down")
            async with http.post(f"{server.url}/demo/click", json={
                    "user": "U0ALICE", "channel": DEMO_CHANNEL, "message_ts": answer["ts"], "block_id": "b",
                    "action_id": down["action_id"], "value": down["value"]}) as r:
                assert r.status == 200
            await until(lambda: bool(demo.slack.modals))
            [modal] = demo.slack.modals
            assert modal["user"] == "U0ALICE" and {"type": "modal", "modal": modal} in shown  # the page opens it
            form = f"{server.url}/demo/submit"
            async with http.post(form, json={"user": "U0ALICE", "view_id": modal["view"]["id"], "values": {}}) as r:
                assert await r.json() == {"ok": False, "errors": {"reason": "Choose what was wrong."}}
            async with http.post(form, json={"user": "U0BOB", "view_id": modal["view"]["id"]}) as r:
                assert r.status == 400  # only the person it opened for sees it
            async with http.post(form, json={"user": "U0ALICE", "view_id": modal["view"]["id"],
                                             "values": picked("too_slow")}) as r:
                assert await r.json() == {"ok": True, "errors": None}
            await until(lambda: any("noted (too slow)" in t for t in demo.slack.ephemeral_texts("U0ALICE")))
            assert demo.service is not None
            [entry] = await demo.service.core.reports.feedback.latest("down")
            assert entry.user == "U0ALICE" and entry.reason == "too_slow"
    finally:
        await demo.close()
        await server.stop()


async def _collect(into: list[dict[str, Any]], change: dict[str, Any]) -> None:
    into.append(change)


async def test_the_store_keeps_one_vote_per_person_and_answer(store: RedisStore) -> None:
    """Redis and the in-process store alike: a second vote is refused, the same write again (a retry after a lost
    reply) is the same vote, and the latest lists are per rating, newest first, across shards."""
    def entry(run: str, user: str, rating: str = "down", at: float = 1.0, reason: str = "missed") -> FeedbackEntry:
        return FeedbackEntry.of(run_id=run, thread_id=f"slack:C1:{run}", rating=rating, reason=reason,
                                question="q" * 3000, answer="a", model="m", user=user, at=at)

    for feedback in (store.feedback, MemoryStore().feedback):
        first = entry("1.1", "U1")
        assert await feedback.add(first) and await feedback.add(first)  # a retry: the same vote
        assert not await feedback.add(entry("1.1", "U1", "up", at=2.0))  # a second vote
        assert await feedback.rated("1.1", "slack:C1:1.1", "U1") and not await feedback.rated("1.1", "x", "U2")
        assert await feedback.add(entry("2.2", "U1", at=3.0, reason="other"))
        assert [e.run_id for e in await feedback.latest("down")] == ["2.2", "1.1"]
        assert await feedback.latest("up") == []
        assert len(first.question) == 2000 and first.question.endswith("…")


async def test_home_does_not_say_none_when_it_read_only_others(redis_url: str, prefix: str, slack: FakeSlack) -> None:
    """A busy private channel's newer 👎 filled what App Home read: someone outside it was told "No answer was rated
    👎 lately" with one of their own channel's from minutes before."""
    slack.private.add("C0SECRET")
    slack.members["C0SECRET"] = {"UBOT", "UIN"}
    ws = await open_workspace(redis_url, prefix, slack)
    try:
        for i in range(DOWN_READ):
            await ws.store.feedback.add(FeedbackEntry.of(
                run_id=f"r{i}", thread_id=f"slack:C0SECRET:{i}.1", rating="down", question="q", answer="a",
                model="m", user="UIN"))
        home = ws.service.inbound.home
        assert home is not None
        said = await home_lines(ws.store, home.visibility, home.people, "UOTHER", "en")
        assert f"None you can see among the latest {DOWN_READ} 👎." in said and "lately" not in said
    finally:
        await ws.stop()


async def test_a_question_opspilot_composed_names_its_asker_on_home_and_in_the_handover(
        redis_url: str, prefix: str, slack: FakeSlack) -> None:
    """The "Investigate with OpsPilot" shortcut's question is OpsPilot's own sentence ("<@UREQ> asked me to…"):
    App Home's latest 👎 and the handover's topic escaped it as someone's words, so people read a raw "<@UREQ>"."""
    from bot.demo.workspace import all_text

    slack.profiles["UREQ"] = "Rita"
    ws = await open_workspace(redis_url, prefix, slack)
    try:
        posted = slack.post_as_user(CHANNEL, "UALICE", "payments is throwing 500s since 10:02")
        await ws.sender.action({"type": "message_action", "callback_id": "opspilot_investigate_message",
                                "trigger_id": "sc-1", "team": {"id": "T0001"}, "user": {"id": "UREQ"},
                                "channel": {"id": CHANNEL}, "message": {k: posted[k] for k in ("ts", "text", "user")},
                                "response_url": slack.response_url(CHANNEL)})
        await ws.settle()
        answer = slack.thread(CHANNEL, posted["ts"])[-1]
        down = next(b for b in buttons(answer) if b["action_id"] == "opspilot_feedback_down")
        await ws.sender.action(block_action(user="UREQ", channel=CHANNEL, message=answer,
                                            action_id=down["action_id"], value=down["value"]))
        await ws.settle()
        await ws.sender.action(view_submission(user="UREQ", view=slack.modals[-1]["view"],
                                               values=picked("wrong_facts", "off")))
        await ws.settle()
        await ws.sender.event({"type": "app_home_opened", "user": "UREQ", "tab": "home", "channel": "D0HOME"})
        await ws.sender.command({"command": "/opspilot", "text": "handover", "user_id": "UREQ", "channel_id": CHANNEL,
                                 "team_id": "T0001", "trigger_id": "9.2", "response_url": slack.response_url(CHANNEL)})
        await ws.settle()
        home = json.dumps(slack.homes.get("UREQ"), ensure_ascii=False)
        handover = next(all_text(m) for (c, _), m in slack.messages.items()
                        if c == CHANNEL and "Handover" in all_text(m))
        for where, text in (("home", home), ("handover", handover)):
            assert "&lt;@UREQ&gt;" not in text and "@Rita asked me to investigate" in text, (where, text)
            assert re.search(r"@Rita asked me to investigate[^“”]*…", text), (where, text)  # cut, and says so
    finally:
        await ws.stop()
