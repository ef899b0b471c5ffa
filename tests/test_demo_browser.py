"""`opspilot demo` in a real headless browser (Debian's Chromium driven by Playwright): ask the OpsPilot
question → watch the steps → fill the form → confirm the restart as an approver → read the answer."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Page, async_playwright, expect

from bot.config import Settings
from bot.demo.server import Demo
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
async def demo_url(redis_url: str, prefix: str) -> AsyncIterator[str]:
    demo = Demo(Settings(redis_url=redis_url, key_prefix=prefix), free_port())
    server = await demo.start()
    yield server.url
    await demo.close()
    await server.stop()


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
    await expect(answer).to_contain_text("错误率从 4.30% 降到 0.30%")
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
