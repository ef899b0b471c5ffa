"""Visibility follows Slack membership, through the real endpoint: App Home (waiting cards, your questions,
follow-ups, schedules, recent changes, 👎 notes) lists a private channel's items to its members only, and to
nobody while Slack cannot say who they are; a public channel's to anyone allowed; ``opspilot stats`` shows a
private conversation's words to nobody. The rule itself (DMs, pages of members) against the local Slack."""

from __future__ import annotations

from pathlib import Path

from slack_sdk.web.async_client import AsyncWebClient

from bot.demo.sender import mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.slack.inbound.visibility import Visibility
from bot.slack.outbound.thread_meta import thread_key
from tests.slack_harness import CHANNEL, Workspace, ask_restart, confirm, open_workspace
from tests.test_cli import run_cli
from tests.test_feedback import answered, picked, rate, submit
from tests.test_home import home_text, opened
from tests.test_schedules import command
from tests.test_timers import Clock, open_at, schedule

APPROVERS = {"restart_service": {"prod": {"users": ["UBOSS", "UDAVE"]}}}
NOTE = "ORION-7731 cutover for ACME"


def private(slack: FakeSlack, *members: str) -> None:
    slack.private.add(CHANNEL)
    slack.members[CHANNEL] = {"UBOT", *members}


async def workspace(redis_url: str, prefix: str, slack: FakeSlack) -> Workspace:
    ws = await open_at(redis_url, prefix, slack, Clock(), approvers=APPROVERS)
    assert ws.service.inbound.home is not None
    assert ws.service.timers is not None
    for seen in (ws.service.inbound.home.visibility, ws.service.timers.slack.visibility):
        seen.ttl_s = 0  # membership read at every check: the test changes it
    return ws


async def home(ws: Workspace, user: str) -> dict[str, str]:
    """The sections of ``user``'s Home tab, opened through Slack, by heading."""
    await opened(ws, user)
    text = home_text(ws.slack, user)
    parts = {}
    for name in ("Waiting for you", "Your recent questions", "Your follow-ups and schedules", "Recent changes",
                 "Latest 👎"):
        assert f"*{name}*" in text, name
        parts[name] = text.split(f"*{name}*")[1].split("\n*")[0]
    return parts


async def test_a_private_channels_items_are_listed_to_its_members_only(redis_url: str, prefix: str,
                                                                       slack: FakeSlack, tmp_path: Path) -> None:
    private(slack, "UREQ", "UBOSS")  # UDAVE may use OpsPilot and confirm restarts, but is not in the channel
    ws = await workspace(redis_url, prefix, slack)
    try:
        card = await ask_restart(ws, user="UREQ")
        assert "confirm `restart_service`" in (await home(ws, "UBOSS"))["Waiting for you"]
        assert "restart_service" not in (dave := await home(ws, "UDAVE"))["Waiting for you"]
        assert "Nothing is waiting for you" in dave["Waiting for you"]

        await ws.sender.action(confirm(card, "UBOSS"))
        await ws.settle()
        answer = await answered(ws)
        await rate(ws, answer, "UREQ", "down")
        await submit(ws, "UREQ", slack.modals[-1]["view"], picked("missed", NOTE))
        await schedule(ws, thread_key(CHANNEL, "900.1"))  # UREQ's follow-up
        await command(ws, 'schedule "0 9 * * *" UTC payments nightly errors')  # UREQ's schedule

        boss = await home(ws, "UBOSS")
        assert "`restart_service`" in boss["Recent changes"] and NOTE in boss["Latest 👎"]
        dave = await home(ws, "UDAVE")
        assert "restart_service" not in dave["Recent changes"] and "No change" in dave["Recent changes"]
        assert NOTE not in dave["Latest 👎"] and "payments errors" not in dave["Latest 👎"]
        req = await home(ws, "UREQ")
        assert "is payments holding?" in req["Your follow-ups and schedules"]
        assert "payments nightly errors" in req["Your follow-ups and schedules"]
        assert "payments errors" in req["Your recent questions"]

        slack.members[CHANNEL].discard("UREQ")  # UREQ leaves the channel: its items leave their Home
        req = await home(ws, "UREQ")
        assert "Nothing scheduled" in req["Your follow-ups and schedules"], req
        assert "payments" not in req["Your recent questions"] and "restart" not in req["Your recent questions"]
        assert "restart_service" not in req["Recent changes"] and NOTE not in req["Latest 👎"]

        env = {"REDIS_URL": redis_url, "OPSPILOT_KEY_PREFIX": prefix, "SLACK_BOT_TOKEN": slack.token,
               "SLACK_API_URL": slack.api_url}
        code, out, err = await run_cli(["stats", "--window", "1h"], "", env, tmp_path)
        assert code == 0, err
        latest = out.split("latest 👎 (newest first)")[1]
        assert "(private conversation)" in latest and NOTE not in latest and "payments errors" not in latest
    finally:
        await ws.stop()


async def test_public_items_show_to_anyone_allowed_and_private_ones_to_nobody_while_slack_fails(
        redis_url: str, prefix: str, slack: FakeSlack) -> None:
    slack.members[CHANNEL] = {"UBOT", "UREQ", "UBOSS"}  # public: listed members do not limit who may read it
    ws = await workspace(redis_url, prefix, slack)
    try:
        await ask_restart(ws, user="UREQ")
        assert "confirm `restart_service`" in (await home(ws, "UDAVE"))["Waiting for you"]
        assert "restart it in prod" in (await home(ws, "UREQ"))["Your recent questions"]

        private(slack, "UREQ", "UBOSS")
        slack.fault("error", "conversations.members")  # Slack cannot say who is in it
        boss = await home(ws, "UBOSS")
        assert "restart_service" not in boss["Waiting for you"] and "Nothing is waiting" in boss["Waiting for you"]
        assert "restart it in prod" not in (await home(ws, "UREQ"))["Your recent questions"]
        slack.faults.clear()
        assert "confirm `restart_service`" in (await home(ws, "UBOSS"))["Waiting for you"]
        slack.fault("refuse", "conversations.info", error="missing_scope")
        assert "Nothing is waiting" in (await home(ws, "UBOSS"))["Waiting for you"]
    finally:
        await ws.stop()


async def test_the_rule_reads_every_page_of_members_and_gives_a_dm_to_its_person(slack: FakeSlack) -> None:
    slack.private.add("C0BIG")
    slack.members["C0BIG"] = {f"U{i:05d}" for i in range(450)}  # three pages of 200
    seen = Visibility(AsyncWebClient(token=slack.token, base_url=slack.api_url))
    assert await seen.readable("U00449", "C0BIG") and not await seen.readable("UOUT", "C0BIG")
    assert len(slack.called("conversations.members")) == 3  # cached after: one read per TTL
    assert [c.get("cursor") for c in slack.called("conversations.members")] == [None, "200", "400"]
    assert await seen.readable("UANY", "C0PUBLIC") and await seen.public("C0PUBLIC")
    assert not await seen.public("C0BIG")
    assert await seen.readable("UREQ", "D0REQ", person="UREQ")
    assert not await seen.readable("UOTHER", "D0REQ", person="UREQ")  # a DM's items: its person's only
    assert not await seen.readable("UREQ", "")


async def test_a_guest_reads_a_public_channel_only_as_its_member(slack: FakeSlack) -> None:
    """A single- or multi-channel guest cannot read the public channels they were not invited to: their App Home
    listed those channels' items all the same."""
    slack.members["C0PUBLIC"] = {"UBOT", "UREQ", "UGUEST2"}
    slack.guests.update({"UGUEST", "UGUEST2"})
    seen = Visibility(AsyncWebClient(token=slack.token, base_url=slack.api_url))
    assert await seen.readable("UREQ", "C0PUBLIC") and await seen.readable("UANY", "C0PUBLIC")
    assert not await seen.readable("UGUEST", "C0PUBLIC")  # not a member
    assert await seen.readable("UGUEST2", "C0PUBLIC")  # invited
    slack.fault("error", "users.info")  # who is a guest cannot be told: public items are left out
    assert not await Visibility(AsyncWebClient(token=slack.token, base_url=slack.api_url)).readable(
        "UNEW", "C0PUBLIC")


async def test_another_organisation_s_account_reads_a_public_channel_only_as_its_member(slack: FakeSlack) -> None:
    """users.info answering user_not_found (another organisation's account) counted as a full member: App Home
    showed it a public channel's waiting card, changes and 👎 notes. A Slack Connect account (another team id) the
    same."""
    slack.members["C0PUBLIC"] = {"UBOT", "UREQ", "UCONNECT2"}
    slack.unknown_users.add("UFOREIGN")
    slack.external_users.update({"UCONNECT": "T0THEIRS", "UCONNECT2": "T0THEIRS"})
    seen = Visibility(AsyncWebClient(token=slack.token, base_url=slack.api_url))
    assert await seen.readable("UREQ", "C0PUBLIC")  # this workspace's own member
    assert not await seen.readable("UFOREIGN", "C0PUBLIC") and not await seen.readable("UCONNECT", "C0PUBLIC")
    assert await seen.readable("UCONNECT2", "C0PUBLIC")  # a member of the shared channel reads it
    slack.fault("error", "auth.test")  # whose workspace an account is cannot be told: left out
    assert not await Visibility(AsyncWebClient(token=slack.token, base_url=slack.api_url)).readable(
        "UANY", "C0PUBLIC")


async def test_guests_and_other_organisations_accounts_start_nothing_and_confirm_nothing(
        redis_url: str, prefix: str, slack: FakeSlack) -> None:
    """A Slack Connect account's mention started a run in a shared channel, and a guest confirmed a prod restart
    someone else asked for, where nobody was named (App Home already treated both as outsiders). Named in
    ``allowed_users``, or with ``allow_outsiders``, they may."""
    slack.external_users["UEXT"] = "T0OTHERORG"
    slack.guests.add("UGUEST")
    ws = await open_workspace(redis_url, prefix, slack)
    try:
        await ws.sender.event(mention(CHANNEL, "UEXT", "what's wrong with payments?", "300.1"))
        await ws.settle()
        assert (await ws.store.stats(3600)).runs == 0
        assert any("other organisations' accounts may not use OpsPilot" in t for t in slack.ephemeral_texts("UEXT"))
        card = await ask_restart(ws)
        await ws.sender.action(confirm(card, "UGUEST"))
        await ws.settle()
        assert ws.toolbox.restarts.done == [] and slack.ephemeral_texts("UGUEST")
        await ws.sender.action(confirm(card, "UAPPROVER"))  # this workspace's own member
        await ws.settle()
        assert len(ws.toolbox.restarts.done) == 1
    finally:
        await ws.stop()
    for config in ({"allowed_users": ["UEXT"]}, {"allow_outsiders": True}):
        ws = await open_workspace(redis_url, f"{prefix}-{len(config)}-{config.get('allow_outsiders')}", slack,
                                  **config)
        try:
            await ws.sender.event(mention(CHANNEL, "UEXT", "what's wrong with payments?", "301.1"))
            await ws.settle()
            assert (await ws.store.stats(3600)).runs == 1, config
        finally:
            await ws.stop()



async def test_a_sibling_workspace_s_member_of_our_enterprise_grid_is_one_of_ours(slack: FakeSlack) -> None:
    """On Enterprise Grid a channel shared across the organisation's workspaces holds members whose team id is a
    sibling's: they were refused as "other organisations' accounts". Another organisation's stays an outsider."""
    from bot.slack.inbound.accounts import Accounts

    slack.enterprise = "E0OURS"
    slack.external_users.update({"USIBLING": "T0SIBLING", "UCONNECT": "T0THEIRS"})
    slack.grid_users.update({"USIBLING": "E0OURS", "UCONNECT": "E0THEIRS"})
    accounts = Accounts(AsyncWebClient(token=slack.token, base_url=slack.api_url))
    assert await accounts.outsider("USIBLING") is False and await accounts.outsider("UREQ") is False
    assert await accounts.outsider("UCONNECT") is True


async def test_while_users_info_fails_a_name_or_an_account_is_not_asked_again_on_every_question(
        slack: FakeSlack) -> None:
    """A failed lookup was not kept: while Slack hung, every question naming colleagues (and every first question
    of a person) waited for users.info again, one name after another."""
    from bot.slack.inbound.accounts import Accounts
    from bot.slack.outbound.people import People

    slack.fault("error", "users.info")
    client = AsyncWebClient(token=slack.token, base_url=slack.api_url)
    people, accounts = People(client), Accounts(client)
    asked = []
    for _ in range(2):
        assert await people.plain("<@UANN> and <@UBOB>, can you check?", me=None) == "@UANN and @UBOB, can you check?"
        assert await accounts.outsider("UCAROL") is None
        asked.append(len(slack.called("users.info")))
    assert asked[0] >= 3 and asked[1] == asked[0], asked  # the second question asked Slack nothing
