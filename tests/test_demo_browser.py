"""`opspilot demo` in a real headless browser (Debian's Chromium driven by Playwright): ask the OpsPilot
question → watch the steps → fill the form → confirm the restart as an approver → read the answer."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from playwright.async_api import Locator, Page, async_playwright, expect

from bot.config import Settings
from bot.demo.server import ALERTS, CHANNEL, Demo
from tests.conftest import free_port
from tests.language_scan import leaks

ARTIFACTS = Path(__file__).parent.parent / "artifacts"
expect.set_options(timeout=30_000)
QUESTION = "看看支付服务最近报错，顺便对照一下文档里的处理建议"


def chromium() -> str:
    path = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.fail("Chromium is not installed: apt-get install chromium (the .ci/run script does this)")
    return path


@pytest.fixture
async def demo(redis_url: str, prefix: str) -> AsyncIterator[Demo]:
    demo = Demo(Settings(redis_url=redis_url, key_prefix=prefix), free_port())
    server = await demo.start()
    yield demo
    await demo.close()
    await server.stop()


@pytest.fixture
def demo_url(demo: Demo) -> str:
    return f"http://127.0.0.1:{demo.port}"


@pytest.fixture
async def page() -> AsyncIterator[Page]:
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=chromium(), args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        page = await browser.new_page(viewport={"width": 1500, "height": 1000})
        page.set_default_timeout(30_000)
        yield page
        await browser.close()


DEMO_PEOPLE = ("Alice", "Bob", "Mallory")
# An element's text as OpsPilot wrote it: code (`…`) and links (<url|label>) marked again, the page's own chrome out.
_AS_WRITTEN = """(el) => {
  const t = el.cloneNode(true);
  t.querySelectorAll('.streaming, .author, .time, .badge, .only-you').forEach((e) => e.remove());
  t.querySelectorAll('pre, code').forEach((e) => e.replaceWith('`' + e.textContent + '`'));
  t.querySelectorAll('a').forEach((e) => e.replaceWith('<' + e.href + '|' + e.textContent + '>'));
  document.body.appendChild(t);  // innerText needs it laid out
  const text = t.innerText;
  t.remove();
  return text;
}"""


async def shown_by_opspilot(page: Page) -> list[str]:
    """The text of every message OpsPilot posted in the open thread (an alerting tool's are not its own)."""
    texts: list[str] = await page.get_by_test_id("thread").evaluate(
        f"(thread) => [...thread.querySelectorAll('.msg')].filter((m) => m.querySelector('.avatar.bot') && "
        f"!m.querySelector('.attachment')).map((m) => ({_AS_WRITTEN})(m.querySelector('.text')))")
    return texts


async def confirm_as(page: Page, user: str) -> None:
    await page.locator(f'[data-user="{user}"]').click()
    card = page.locator("#thread .msg", has_text="需要确认").last  # a Chinese thread: its cards are Chinese
    await card.get_by_role("button", name="确认").click()
    await expect(page.get_by_test_id("confirm-dialog")).to_be_visible()
    await page.get_by_test_id("dialog-confirm").click()


async def test_the_whole_scenario_in_the_browser(demo_url: str, page: Page) -> None:
    await page.goto(demo_url)
    await expect(page.get_by_test_id("scripted")).to_be_visible()  # the model is labelled as scripted

    # Alice asks in the channel; the thread opens and the steps stream in as task cards.
    await page.get_by_test_id("composer").fill(f"@OpsPilot {QUESTION}")
    await page.get_by_test_id("composer").press("Enter")
    thread = page.get_by_test_id("thread")
    await expect(thread).to_be_visible()
    await expect(thread.locator(".msg", has_text="query_logs")).to_be_visible()
    logs = thread.get_by_test_id("task").filter(has_text="query_logs · payments/prod")
    await expect(logs).to_have_attribute("data-status", "complete")
    await expect(logs).to_contain_text("timeout acquiring connection")  # the call's output on its card
    await expect(thread.locator(".msg", has_text="Working on it")).to_have_count(0)  # one language throughout
    await expect(thread.locator(".msg", has_text="docs/payments-db-timeouts.md").last).to_be_visible()
    await expect(thread).to_contain_text("timeout acquiring connection")

    # "restart it" with no environment: a form with the catalog's environments.
    await page.get_by_test_id("thread-composer").fill("restart it")
    await page.get_by_test_id("thread-composer").press("Enter")
    form = thread.locator(".msg", has_text="还需要一点信息").last
    await form.locator("select").select_option("prod")
    await form.get_by_role("button", name="提交").click()
    await expect(thread.locator(".msg", has_text="需要确认")).to_be_visible()
    await expect(thread.locator(".msg", has_text=re.compile(r"@Alice 于 \d\d:\d\d UTC 提交：环境 = prod"))
                 ).to_be_visible()

    # The requester may not approve her own prod restart; someone not allowed is told so, privately.
    await confirm_as(page, "U0ALICE")
    await expect(thread).to_contain_text("双人规则：发起人不能批准自己")  # refusals speak the thread's language
    await confirm_as(page, "U0MALLORY")
    await expect(thread).to_contain_text("你不在可以使用 OpsPilot 的名单里")
    await expect(thread).not_to_contain_text("双人规则：发起人不能批准自己")  # Alice's ephemeral is hers alone

    # Bob, the approver, confirms: the card closes and the answer reports a verified restart.
    await confirm_as(page, "U0BOB")
    await expect(thread.locator(".msg", has_text=re.compile(r"@Bob 于 \d\d:\d\d UTC 确认"))).to_be_visible()
    await expect(thread.locator(".msg", has_text="需要确认")).to_have_count(0)
    answer = thread.locator(".msg", has_text="已重启 payments（prod）")  # backticks render as <code>
    await expect(answer).to_be_visible()
    await expect(answer).to_contain_text("错误率从 4.3% 降到 0.30%")
    await expect(answer).to_contain_text("批准人 @Bob")

    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / "demo-scenario.png"), full_page=True)
    assert (ARTIFACTS / "demo-scenario.png").stat().st_size > 10_000

    # One language throughout: no English in what OpsPilot showed, outside code and quoted data — the thread
    # (task cards, cards, forms, answers, Bob's and Mallory's notes were theirs alone) and Alice's Home.
    shown = await shown_by_opspilot(page)
    await page.locator('[data-user="U0ALICE"]').click()
    await page.get_by_test_id("app-home").click()
    await expect(page.get_by_test_id("home")).to_contain_text("你最近的问题")
    shown.append(await page.get_by_test_id("home").evaluate(f"(box) => ({_AS_WRITTEN})(box)"))
    assert len(shown) > 5 and any("行错误日志" in t for t in shown), shown  # task outputs were read too
    found = leaks(shown, "zh", proper=DEMO_PEOPLE)
    assert not found, "\n".join(f"{hit!r} in {text[:200]!r}" for hit, text in found)


async def test_the_demo_alert_is_investigated_in_its_thread(demo_url: str, page: Page) -> None:
    await page.goto(demo_url)
    await page.get_by_test_id("channel-ops-alerts").click()
    await page.get_by_test_id("fire-alert").click()
    channel = page.get_by_test_id("channel-messages")
    alert = channel.locator(".msg", has_text="[FIRING:1] PaymentsHighErrorRate")
    await expect(alert).to_be_visible()  # posted by "Alertmanager" through the incoming webhook
    await expect(alert).to_contain_text("Alertmanager")
    await alert.get_by_test_id("replies").click()
    thread = page.get_by_test_id("thread")
    await expect(thread.locator(".msg", has_text="Payment Service").last).to_be_visible()
    await expect(thread).to_contain_text("error rate 4.3%")
    await page.get_by_test_id("fire-alert").click()  # the same group again: one line, no second run
    await expect(thread).to_contain_text("Fired again")
    await page.get_by_test_id("resolve-alert").click()
    await expect(thread).to_contain_text("Resolved at")
    await expect(thread.locator(".msg", has_text="Payment Service")).to_have_count(1)
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / "demo-alert.png"), full_page=True)
    await page.get_by_test_id("channel-ops-oncall").click()  # the other channel shows none of it
    await expect(channel).not_to_contain_text("PaymentsHighErrorRate")
    await expect(thread).to_be_hidden()


async def test_app_home_shows_what_waits_for_the_approver(demo_url: str, page: Page) -> None:
    await page.goto(demo_url)
    await page.get_by_test_id("composer").fill("@OpsPilot restart payments in prod")
    await page.get_by_test_id("composer").press("Enter")
    thread = page.get_by_test_id("thread")
    await expect(thread.locator(".msg", has_text="Confirmation needed")).to_be_visible()
    await page.locator('[data-user="U0BOB"]').click()
    await page.get_by_test_id("app-home").click()
    home = page.get_by_test_id("home")
    await expect(home).to_contain_text("Waiting for you")
    await expect(home).to_contain_text("confirm restart_service on payments/prod")
    await expect(home).to_contain_text("asked by @Alice")
    await expect(home).to_contain_text("Recent changes")
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / "demo-home.png"), full_page=True)
    await page.locator('[data-user="U0ALICE"]').click()  # Alice is not an approver: nothing waits for her
    await expect(home).to_contain_text("Nothing is waiting for you")
    await expect(home).to_contain_text("restart payments in prod")  # her recent question


async def test_app_home_opens_the_thread_it_names_in_the_page(demo_url: str, page: Page) -> None:
    """"open the thread" went to slack.com, in a new tab: the offline demo has no such place."""
    await page.context.route("https://**/*", lambda route: route.fulfill(status=200, body="off the demo"))
    await page.goto(demo_url)
    await page.get_by_test_id("composer").fill("@OpsPilot restart payments in prod")
    await page.get_by_test_id("composer").press("Enter")
    await expect(page.get_by_test_id("thread").locator(".msg", has_text="Confirmation needed")).to_be_visible()
    await page.locator("#close-thread").click()
    await page.locator('[data-user="U0BOB"]').click()
    await page.get_by_test_id("app-home").click()
    link = page.get_by_test_id("home").get_by_role("link", name="open the thread").first
    await expect(link).to_be_visible()
    pages = len(page.context.pages)
    await link.click()
    thread = page.get_by_test_id("thread")
    await expect(thread.locator(".msg", has_text="Confirmation needed")).to_be_visible()
    assert len(page.context.pages) == pages


async def say_in_thread(page: Page, text: str) -> None:
    await page.get_by_test_id("thread-composer").fill(text)
    await page.get_by_test_id("thread-composer").press("Enter")


async def play_the_chinese_incident(page: Page) -> Locator:
    """The README's scenario, to its verified restart: Alice asks, says "restart it", picks prod; Bob confirms."""
    await page.get_by_test_id("composer").fill(f"@OpsPilot {QUESTION}")
    await page.get_by_test_id("composer").press("Enter")
    thread = page.get_by_test_id("thread")
    await expect(thread.locator(".msg", has_text="docs/payments-db-timeouts.md").last).to_be_visible()
    await say_in_thread(page, "restart it")
    form = thread.locator(".msg", has_text="还需要一点信息").last
    await form.locator("select").select_option("prod")
    await form.get_by_role("button", name="提交").click()
    await expect(thread.locator(".msg", has_text="需要确认")).to_be_visible()
    await confirm_as(page, "U0BOB")
    await expect(thread.locator(".msg", has_text="已重启 payments（prod）")).to_be_visible()
    await page.locator('[data-user="U0ALICE"]').click()
    return thread


async def test_a_summary_becomes_the_channels_canvas_and_a_second_one_edits_it(demo_url: str, page: Page) -> None:
    await page.goto(demo_url)
    thread = await play_the_chinese_incident(page)

    await say_in_thread(page, "@OpsPilot 总结")
    tab = page.get_by_test_id("canvas-tab")
    await expect(tab).to_have_count(1)  # canvases.create with channel_id: a tab in the channel's header
    await expect(tab).to_contain_text(f"事件：{QUESTION}")
    note = thread.locator(".msg", has_text="画布")
    await expect(note).to_have_count(1)  # the note says where it went: the channel, by its name
    await expect(note).to_contain_text("#ops-oncall")
    await tab.click()
    canvas, body = page.get_by_test_id("canvas"), page.get_by_test_id("canvas-body")
    await expect(canvas).to_be_visible()
    await expect(page.get_by_test_id("canvas-title")).to_have_text(f"事件：{QUESTION}")
    await expect(body.locator("h1")).to_have_text(f"事件总结：{QUESTION}")
    await expect(body.locator("h2", has_text="时间线")).to_be_visible()
    await expect(body.locator("table th").first).to_have_text("UTC")  # the timeline is a table
    change = body.locator("li", has_text="发起人")  # what was done: the restart, one line
    await expect(change).to_have_count(1)
    await expect(change.locator("code").first).to_have_text("restart_service")
    for part in ("发起人 @Alice", "批准人 @Bob", "错误率 4.3% → 0.30%"):  # from the records, in Chinese
        await expect(change).to_contain_text(part)
    await expect(body.locator(".mention", has_text="@Bob").first).to_be_visible()
    await expect(body).not_to_contain_text("![](")  # mentions, tables and code rendered, not shown raw
    await expect(body).not_to_contain_text("|---")
    await expect(body).not_to_contain_text("`")
    await expect(canvas).to_have_attribute("data-edits", "0")
    shown = await body.evaluate(f"(box) => ({_AS_WRITTEN})(box)")
    found = leaks([shown], "zh", proper=DEMO_PEOPLE)
    assert not found, "\n".join(f"{hit!r} in {text[:200]!r}" for hit, text in found)
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / "demo-canvas.png"), full_page=True)

    # A follow-up question, then "summarize" again: the same canvas is edited, and the open canvas shows it live.
    await say_in_thread(page, "@OpsPilot 支付服务现在的错误率是多少？")
    await expect(thread.locator(".msg", has_text="支付服务现在的错误率是多少")).to_have_count(1)
    await expect(thread.locator(".msg").last).not_to_contain_text("支付服务现在的错误率是多少")  # OpsPilot is on it
    await expect(thread.locator(".msg .streaming")).to_have_count(0)  # and has answered
    await say_in_thread(page, "@OpsPilot 总结")
    await expect(canvas).to_have_attribute("data-edits", "1")
    await expect(body).to_contain_text("@Alice 提问：支付服务现在的错误率是多少？")
    await expect(body.locator("li", has_text="发起人")).to_contain_text("批准人 @Bob")
    await expect(tab).to_have_count(1)
    await expect(thread.locator(".msg", has_text="画布")).to_have_count(1)  # the note edited, not posted again


async def api(demo: Demo, method: str, body: dict[str, Any]) -> dict[str, Any]:
    """A Web API call to the demo's local Slack, as the bot makes them."""
    headers = {"Authorization": f"Bearer {demo.settings.slack.bot_token}"}
    async with aiohttp.ClientSession() as http, http.post(
            f"http://127.0.0.1:{demo.port}/api/{method}", json=body, headers=headers) as answer:
        reply: dict[str, Any] = await answer.json()
    assert reply["ok"], reply
    return reply


HOSTILE = "<img src=x onerror=\"window.pwned=1\">"


async def test_a_canvas_is_escaped_rendered_and_updated_live(demo: Demo, demo_url: str, page: Page) -> None:
    await page.goto(demo_url)
    await expect(page.get_by_test_id("scripted")).to_be_visible()
    for _ in range(100):  # the page's event feed is connected: what follows arrives through it
        if demo._feeds:
            break
        await asyncio.sleep(0.05)
    markdown = (f"# Hello <script>window.pwned=1</script>\n\nSome **bold**, _italic_ and `<b>code</b>`; "
                "[a link](https://example.test/a?b=1&c=2), [bad](javascript:window.pwned=1), ![](@U0BOB).\n\n"
                f"| When | What |\n|---|---|\n| 09:40 | {HOSTILE} a \\| b |\n\n- one\n- two <i>x</i>\n")
    created = await api(demo, "canvases.create", {"title": f"{HOSTILE}Payments", "channel_id": CHANNEL,
                                                 "document_content": {"type": "markdown", "markdown": markdown}})
    await api(demo, "canvases.create", {"title": "elsewhere", "channel_id": ALERTS,
                                        "document_content": {"type": "markdown", "markdown": "# other"}})
    tab = page.get_by_test_id("canvas-tab")
    await expect(tab).to_have_count(1)  # this channel's canvas only
    await expect(tab).to_have_text(f"📄 {HOSTILE}Payments")
    await tab.click()
    body = page.get_by_test_id("canvas-body")
    await expect(page.get_by_test_id("canvas-title")).to_have_text(f"{HOSTILE}Payments")
    await expect(body.locator("h1")).to_have_text("Hello <script>window.pwned=1</script>")
    await expect(body.locator("b")).to_have_text("bold")
    await expect(body.locator("i")).to_have_text("italic")
    await expect(body.locator("code")).to_have_text("<b>code</b>")
    await expect(body.locator('a[href="https://example.test/a?b=1&c=2"]')).to_have_text("a link")
    await expect(body.locator("a")).to_have_count(1)  # a javascript: link is no link
    await expect(body.locator(".mention")).to_have_text("@Bob")
    await expect(body.locator("td").last).to_have_text(f"{HOSTILE} a | b")
    await expect(body.locator("li")).to_have_text(["one", "two <i>x</i>"])
    await expect(page.locator("#canvas script, #canvas img, #canvas-tabs img")).to_have_count(0)
    assert await page.evaluate("() => window.pwned") is None

    await api(demo, "canvases.edit", {"canvas_id": created["canvas_id"], "changes": [
        {"operation": "replace", "document_content": {"type": "markdown", "markdown": "# Second\n- new line"}}]})
    await expect(body.locator("h1")).to_have_text("Second")  # live, through the feed: no reload
    await expect(body.locator("li")).to_have_text(["new line"])
    await expect(page.get_by_test_id("canvas")).to_have_attribute("data-edits", "1")
    await page.get_by_test_id("channel-ops-alerts").click()  # another channel: its own canvas, this one closed
    await expect(page.get_by_test_id("canvas")).to_be_hidden()
    await expect(tab).to_have_text("📄 elsewhere")


async def test_canvases_refused_the_summary_is_a_file_to_open_in_the_thread(demo: Demo, demo_url: str,
                                                                            page: Page) -> None:
    demo.slack.canvases_refused = "canvas_disabled_user_team"
    await page.goto(demo_url)
    await page.get_by_test_id("composer").fill("@OpsPilot restart payments in prod")
    await page.get_by_test_id("composer").press("Enter")
    thread = page.get_by_test_id("thread")
    await expect(thread.locator(".msg", has_text="Confirmation needed")).to_be_visible()
    await say_in_thread(page, "@OpsPilot summarize")
    file = thread.get_by_test_id("file")
    await expect(file).to_have_count(1)
    await expect(file).to_contain_text("incident-summary-")
    await expect(thread.locator(".msg", has=page.get_by_test_id("file"))).to_contain_text("canvas_disabled_user_team")
    await expect(page.get_by_test_id("canvas-tab")).to_have_count(0)
    href = await file.get_attribute("href")
    assert href is not None and href.startswith("/demo/files/")  # served by the demo itself
    async with page.context.expect_page() as opened:
        await file.click()
    tab = await opened.value
    await expect(tab.locator("body")).to_contain_text("# Incident summary: `restart payments in prod`")
    await expect(tab.locator("body")).to_contain_text("`restart_service` `payments` @ `prod`")
    answer = await page.request.get(f"{demo_url}{href}")
    assert answer.ok and answer.headers["content-type"].startswith("text/plain")


async def test_the_demos_rollback_in_the_browser(demo_url: str, page: Page) -> None:
    """"Was it the deploy?" → yes → Roll back to the release before it → the card shows from → to → confirmed."""
    await page.goto(demo_url)
    await page.get_by_test_id("composer").fill("@OpsPilot 订单服务 staging 的报错是发布引起的吗？")
    await page.get_by_test_id("composer").press("Enter")
    thread = page.get_by_test_id("thread")
    await expect(thread.locator(".msg", has_text="是：报错在 2026.12.02-1 之后 5 秒 开始").last).to_be_visible()
    await thread.get_by_role("button", name="回滚到 2026.12.01-4").click()
    card = thread.locator(".msg", has_text="需要确认").last
    await expect(card).to_contain_text("2026.12.02-1")
    await expect(card).to_contain_text("2026.12.01-4")
    await expect(card).to_contain_text("orders-api:4.1.9")
    await page.locator('[data-user="U0BOB"]').click()
    await card.get_by_role("button", name="确认").click()
    await page.get_by_test_id("dialog-confirm").click()
    await expect(thread.locator(".msg", has_text="已回滚 orders").last).to_be_visible()
    await expect(thread.locator(".msg", has_text="需要确认").last.get_by_role("button", name="确认")).to_have_count(0)


async def test_a_message_posted_while_the_page_loads_is_shown(demo: Demo, demo_url: str, page: Page) -> None:
    """The page read its snapshot, then opened its feed: a question asked between the two (a slow machine, a
    reload mid-run) was never shown in that tab."""
    from playwright.async_api import Route

    async def late(route: Route) -> None:  # the feed connects late, as on a loaded machine
        await asyncio.sleep(1.5)
        await route.continue_()

    await page.route("**/demo/feed", late)
    snapshot = asyncio.Event()
    page.on("response", lambda r: "/demo/state" in r.url and snapshot.set())
    await page.goto(demo_url, wait_until="commit")
    await asyncio.wait_for(snapshot.wait(), 30)  # asked right after the page read its snapshot
    asked = {"user": "U0BOB", "channel": CHANNEL, "text": "@OpsPilot orders errors in staging"}
    async with aiohttp.ClientSession() as http, http.post(f"{demo_url}/demo/say", json=asked) as answer:
        root = (await answer.json())["ts"]
    await page.wait_for_selector(f'#messages .msg[data-ts="{root}"]', timeout=30_000)
