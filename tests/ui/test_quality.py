"""Accessibility (axe-core, vendored from npm as tests/ui/axe.min.js, MPL-2.0), keyboard
use, and a 375 px wide screen; and the operations page (issue 13 item 5)."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Browser, Page, expect

from chatmem.messages import Message, SessionKey
from chatmem.worker import BatchState, RetryPolicy
from tests.ui.conftest import ADMIN_KEY, Service, ServiceMaker, choose_tenant, login, shot

AXE = Path(__file__).with_name("axe.min.js")


def _seed(service: Service, key: str) -> str:
    made = service.remember(key, "alice", "Alice's budget is $12,000", tags=["money"])
    service.say(key, "alice", "s1", [{"role": "user", "content": "Hi, I'm Alice", "turn_id": 1}])
    return str(made["id"])


def _pages(memory_id: str) -> list[str]:
    return [
        "/ui/users",
        "/ui/users/alice",
        "/ui/users/alice/sessions/s1",
        "/ui/users/alice/memories",
        f"/ui/users/alice/memories/{memory_id}",
        "/ui/users/alice/search?q=What+is+my+budget%3F",
        "/ui/users/alice/forget",
        "/ui/users/alice/memories?since=bad",
        "/ui/ops",
    ]


def _violations(page: Page) -> list[str]:
    page.add_script_tag(content=AXE.read_text(encoding="utf-8"))
    found = page.evaluate(
        "async () => (await axe.run(document, {runOnly: ['wcag2a', 'wcag2aa', 'best-practice']}))"
        ".violations.map(v => v.id + ': ' + v.nodes.map(n => n.target.join(' ')).join(', '))"
    )
    return list(found)


def test_every_page_passes_axe(browser: Browser, service: Service) -> None:
    key = service.new_key("acme")
    memory_id = _seed(service, key)
    # axe is injected as an inline script, which the pages' CSP refuses (as it should).
    context = browser.new_context(bypass_csp=True)
    page = context.new_page()
    page.goto(service.url + "/ui/login")
    assert _violations(page) == []
    login(page, service, key)
    for path in _pages(memory_id):
        page.goto(service.url + path)
        assert _violations(page) == [], path
    context.close()


def test_keyboard_reaches_the_content_and_shows_focus(page: Page, service: Service) -> None:
    key = service.new_key("acme")
    _seed(service, key)
    login(page, service, key)
    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to content")
    expect(skip).to_be_focused()
    assert page.evaluate("getComputedStyle(document.activeElement).left") != "-9999px"
    page.keyboard.press("Enter")
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")  # the "open a user" field takes the id, Enter submits
    page.keyboard.type("alice")
    page.keyboard.press("Enter")
    expect(page).to_have_url(service.url + "/ui/users/alice")
    page.keyboard.press("Tab")
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline == "solid"


def test_a_375px_screen_is_usable(browser: Browser, service: Service) -> None:
    key = service.new_key("acme")
    memory_id = _seed(service, key)
    context = browser.new_context(viewport={"width": 375, "height": 740}, is_mobile=True)
    page = context.new_page()
    login(page, service, key)
    for path in _pages(memory_id):
        page.goto(service.url + path)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 375, (path, width)
    page.goto(f"{service.url}/ui/users/alice/memories/{memory_id}")
    button = page.get_by_role("button", name="Save as a new version")
    button.scroll_into_view_if_needed()
    box = button.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 375
    assert box["height"] >= 24  # a target a thumb can hit
    page.goto(service.url + "/ui/users/alice/search?q=What+is+my+budget%3F")
    shot(page, "narrow")
    context.close()


def test_operations_queue_retry_and_metrics(page: Page, make_service: ServiceMaker) -> None:
    service = make_service(memory={"auto_store": False})  # no worker: batches stay put
    acme, globex = service.new_key("acme"), service.new_key("globex")
    outbox = service.runtime.outbox
    key = SessionKey.of("acme", "alice", "s1")
    dead = outbox.enqueue(key, [Message(role="user", content="My locker code is 8812")])
    outbox.retry = RetryPolicy(max_attempts=1)  # type: ignore[attr-defined]
    assert [b.batch_id for b in outbox.claim(1)] == [dead]
    assert outbox.fail(dead, "model error: upstream answered 502") is BatchState.DEAD
    outbox.enqueue(SessionKey.of("acme", "alice", "s2"), [Message(role="user", content="hi")])
    outbox.enqueue(SessionKey.of("globex", "gina", "g1"), [Message(role="user", content="x")])
    service.remember(acme, "alice", "Alice's budget is $12,000")
    for question in ("What is my budget?", "thanks!"):
        chat = {"model": "m", "messages": [{"role": "user", "content": question}],
                "memory_context": {"user_id": "alice"}}  # fmt: skip
        assert service.api("POST", "/v1/chat/completions", acme, json=chat).status_code == 200
    login(page, service, acme)
    page.goto(service.url + "/ui/ops")
    expect(page.get_by_test_id("queue-counts")).to_have_text("pending: 1 · leased: 0 · dead: 1")
    expect(page.get_by_test_id("batches-dead")).to_contain_text(
        "model error: upstream answered 502"
    )
    expect(page.get_by_text("Store and embedder")).to_have_count(0)  # service-wide: admin only
    page.get_by_role("button", name="Retry").click()
    expect(page.get_by_test_id("queue-counts")).to_have_text("pending: 2 · leased: 0 · dead: 0")
    assert outbox.get(dead) is not None and outbox.get(dead).state.value == "pending"  # type: ignore[union-attr]
    page.context.clear_cookies()
    login(page, service, ADMIN_KEY)
    choose_tenant(page, "acme")
    page.goto(service.url + "/ui/ops")
    expect(page.get_by_test_id("queue-counts")).to_have_text("pending: 3 · leased: 0 · dead: 0")
    expect(page.get_by_text("acme: 1 live, 0 revoked")).to_be_visible()
    expect(page.get_by_test_id("rates")).to_contain_text("Hit rate: 50.0 %")
    expect(page.get_by_test_id("rates")).to_contain_text("degraded: 0.0 %")
    expect(page.locator("svg.chart")).to_have_count(2)
    shot(page, "ops")
    assert globex
