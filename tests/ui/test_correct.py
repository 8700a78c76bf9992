"""Issue 13 item 4 in a real browser: edit (shown in the API and the history), pin,
change access, forget one memory or a whole user, export; bad input changes nothing."""

from __future__ import annotations

import json

from playwright.sync_api import Page, expect

from tests.ui.conftest import ADMIN_KEY, Service, choose_tenant, login, shot


def test_edit_is_a_new_version_in_the_api_and_the_history(page: Page, service: Service) -> None:
    key = service.new_key("acme")
    made = service.remember(key, "alice", "Alice's budget is $10,000")
    login(page, service, key)
    page.goto(f"{service.url}/ui/users/alice/memories/{made['id']}")
    page.get_by_label("Text").fill("Alice's budget is $12,000")
    page.get_by_label("Importance (0 to 1)").fill("0.8")
    page.get_by_label("Tags (comma-separated)").fill("money, plans")
    page.get_by_label("Why (kept in the history)").fill("she told support")
    page.get_by_role("button", name="Save as a new version").click()
    expect(page.get_by_role("status")).to_contain_text("Saved as a new version")
    expect(page.get_by_test_id("content")).to_have_text("Alice's budget is $12,000")
    history = page.get_by_test_id("history")
    expect(history.locator("li")).to_have_count(2)
    expect(history).to_contain_text("she told support")
    expect(history).to_contain_text("Alice's budget is $10,000")
    stored = service.api("GET", f"/v1/memory/{made['id']}", key).json()
    assert stored["content"]["raw"] == "Alice's budget is $12,000"
    assert stored["metadata"]["version"] == 2
    assert stored["metadata"]["importance"] == 0.8
    assert stored["metadata"]["tags"] == ["money", "plans"]
    entries = service.api("GET", f"/v1/memory/{made['id']}/history", key).json()["entries"]
    assert [e["event"] for e in entries] == ["add", "update"]
    assert entries[1]["reason"] == "she told support"
    shot(page, "edit")


def test_bad_input_is_named_next_to_the_field_and_nothing_changes(
    page: Page, service: Service
) -> None:
    key = service.new_key("acme")
    made = service.remember(key, "alice", "Alice's budget is $10,000")
    login(page, service, key)
    page.goto(f"{service.url}/ui/users/alice/memories/{made['id']}")
    page.get_by_label("Text").fill("Alice's budget is $99")
    page.get_by_label("Importance (0 to 1)").fill("2")
    with page.expect_response(lambda r: r.request.method == "POST") as answer:
        page.get_by_role("button", name="Save as a new version").click()
    assert answer.value.status == 400
    field = page.get_by_label("Importance (0 to 1)")
    expect(field).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#f-importance-error")).to_have_text("a number from 0 to 1")
    expect(page.get_by_label("Text")).to_have_value("Alice's budget is $99")  # kept as typed
    page.get_by_label("Text").fill("   ")
    page.get_by_label("Importance (0 to 1)").fill("0.5")
    page.get_by_role("button", name="Save as a new version").click()
    expect(page.locator("#f-content-error")).to_have_text("the memory's text cannot be blank")
    shot(page, "bad-input")
    stored = service.api("GET", f"/v1/memory/{made['id']}", key).json()
    assert stored["content"]["raw"] == "Alice's budget is $10,000"
    assert stored["metadata"]["version"] == 1


def test_pin_and_change_access(page: Page, service: Service) -> None:
    plain = service.new_key("acme")
    made = service.remember(plain, "alice", "Alice's salary is 50k")
    login(page, service, ADMIN_KEY)
    choose_tenant(page, "acme")
    page.goto(f"{service.url}/ui/users/alice/memories/{made['id']}")
    page.get_by_role("button", name="Pin").click()
    expect(page.get_by_text("pinned: decay never rescores")).to_be_visible()
    assert service.api("GET", f"/v1/memory/{made['id']}", plain).json()["user_metadata"] == {
        "pinned": True
    }
    page.get_by_label("Roles that may read it").fill("hr")
    page.get_by_role("button", name="Change access").click()
    expect(page.get_by_test_id("acl")).to_contain_text("roles: hr")
    expect(page.get_by_test_id("history")).to_contain_text("access: any key → hr")
    assert service.api("GET", f"/v1/memory/{made['id']}", plain).status_code == 404
    hr = service.new_key("acme", ["hr"])
    assert service.api("GET", f"/v1/memory/{made['id']}", hr).status_code == 200


def test_a_tenant_key_may_restrict_only_to_roles_it_holds(page: Page, service: Service) -> None:
    key = service.new_key("acme", ["support"])
    made = service.remember(key, "alice", "Alice's ticket is 42")
    login(page, service, key)
    page.goto(f"{service.url}/ui/users/alice/memories/{made['id']}")
    page.get_by_label("Roles that may read it").fill("hr")
    page.get_by_role("button", name="Change access").click()
    expect(page.locator("#f-roles-error")).to_contain_text("only roles it holds")
    stored = service.api("GET", f"/v1/memory/{made['id']}", key).json()
    assert stored["access_control"]["allowed_roles"] == []


def test_forget_one_memory(page: Page, service: Service) -> None:
    key = service.new_key("acme")
    made = service.remember(key, "alice", "Alice's old phone is 555-0100")
    login(page, service, key)
    page.goto(f"{service.url}/ui/users/alice/memories/{made['id']}")
    page.get_by_role("link", name="Forget this memory…").click()
    expect(page.locator("blockquote")).to_have_text("Alice's old phone is 555-0100")
    page.get_by_role("button", name="Forget it").click()
    expect(page.locator(".notice")).to_have_text("The memory was forgotten.")
    assert service.api("GET", f"/v1/memory/{made['id']}", key).status_code == 404


def test_forget_a_user_names_what_goes_and_needs_the_id(page: Page, service: Service) -> None:
    key = service.new_key("acme")
    service.remember(key, "alice", "Alice likes tea")
    service.remember(key, "alice", "Alice has a dog")
    service.say(key, "alice", "s1", [{"role": "user", "content": "hello"}])
    service.remember(key, "bob", "Bob likes coffee")
    login(page, service, key)
    page.goto(service.url + "/ui/users/alice")
    page.get_by_role("link", name="Forget this user…").click()
    goes = page.get_by_test_id("what-goes")
    expect(goes).to_contain_text("2 memories")
    expect(goes).to_contain_text("1 sessions")
    page.get_by_label("Type the user id to confirm").fill("alicia")
    page.get_by_role("button", name="Forget alice").click()
    expect(page.locator("#f-confirm-error")).to_contain_text("nothing was deleted")
    listed = service.api("GET", "/v1/memory", key, params={"user_id": "alice"}).json()
    assert len(listed["memories"]) == 2
    shot(page, "forget-user")
    page.get_by_label("Type the user id to confirm").fill("alice")
    page.get_by_role("button", name="Forget alice").click()
    expect(page.get_by_role("status")).to_contain_text("The user was forgotten")
    expect(page.get_by_role("row", name="alice")).to_have_count(0)
    listed = service.api("GET", "/v1/memory", key, params={"user_id": "alice"}).json()
    assert listed["memories"] == []
    sessions = service.api("GET", "/v1/sessions", key, params={"user_id": "alice"}).json()
    assert sessions["sessions"] == []
    assert service.api("GET", "/v1/memory", key, params={"user_id": "bob"}).json()["memories"]


def test_export_downloads_the_users_memories_as_jsonl(page: Page, service: Service) -> None:
    key = service.new_key("acme")
    service.remember(key, "alice", "Alice likes tea")
    # The admin writes it: a key may not write a memory it could not read.
    admin = {"X-Chatmem-Tenant": "acme"}
    service.remember(ADMIN_KEY, "alice", "Alice's secret", allowed_roles=["hr"], headers=admin)
    login(page, service, key)
    page.goto(service.url + "/ui/users/alice")
    with page.expect_download() as download:
        page.get_by_role("link", name="Export as JSONL").click()
    lines = download.value.path().read_text(encoding="utf-8").splitlines()
    records = [json.loads(line)["record"] for line in lines]
    assert [r["content"]["raw"] for r in records] == ["Alice likes tea"]  # hr-only stays out
    assert download.value.suggested_filename == "memories-1.jsonl"
