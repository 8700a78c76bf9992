"""Issue 13 items 1-3 in a real browser: users and sessions, memories with filters,
provenance and history, and search with explanations."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.ui.conftest import Service, login, memory_id_in, shot


def _budget_story(service: Service, key: str) -> None:
    """A session in which the budget changes: extraction supersedes the old value."""
    service.say(key, "alice", "s1", [
        {"role": "user", "content": "My monthly budget is $10,000.", "turn_id": 1},
        {"role": "assistant", "content": "Got it.", "turn_id": 1},
    ])  # fmt: skip
    service.drain()
    service.say(key, "alice", "s1", [
        {"role": "user", "content": "My monthly budget is now $12,000.", "turn_id": 2},
        {"role": "assistant", "content": "Updated", "turn_id": 2,
         "metadata": {"interrupted": True, "interrupt_timestamp": 1780000000000,
                      "original": "Updated your budget to $12,000 for every month."}},
    ])  # fmt: skip
    service.drain()


def test_users_sessions_and_rich_messages(page: Page, service: Service) -> None:
    key = service.new_key("acme")
    _budget_story(service, key)
    service.say(key, "alice", "s2", [
        {"role": "user", "content": "What's the weather in Berlin?", "turn_id": 7},
        {"role": "assistant", "content": "", "turn_id": 7, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "weather", "arguments": "{\"city\": \"Berlin\"}"}}]},
        {"role": "tool", "content": "12 C, rain", "tool_call_id": "call_1", "turn_id": 7},
    ])  # fmt: skip
    service.remember(key, "bob", "Bob likes tea")
    login(page, service, key)
    expect(page).to_have_url(service.url + "/ui/users")
    row = page.get_by_role("row", name="alice")
    expect(row).to_contain_text("2")  # sessions
    expect(page.get_by_role("row", name="bob")).to_contain_text("1")
    shot(page, "users")
    page.get_by_role("link", name="alice").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("alice")
    expect(page.get_by_role("link", name="s2")).to_be_visible()
    page.get_by_role("link", name="s2").click()
    expect(page.get_by_text('weather({"city": "Berlin"})')).to_be_visible()
    expect(page.get_by_text("answers tool call call_1")).to_be_visible()
    expect(page.locator(".message").first).to_contain_text("turn 7")
    page.go_back()
    page.get_by_role("link", name="s1").click()
    expect(page.get_by_text("interrupted at")).to_be_visible()
    page.get_by_text("Whole reply before the interruption").click()
    expect(page.get_by_text("Updated your budget to $12,000 for every month.")).to_be_visible()
    shot(page, "session")


def test_memories_provenance_history_and_chain(page: Page, service: Service) -> None:
    key = service.new_key("acme")
    _budget_story(service, key)
    service.remember(key, "alice", "Alice is vegetarian", tags=["food"], type="preference")
    login(page, service, key)
    page.goto(service.url + "/ui/users/alice/memories")
    items = page.locator("li.memory")
    expect(items).to_have_count(3)
    page.get_by_label("State").select_option("superseded")
    page.get_by_role("button", name="Filter").click()  # htmx swaps the list in
    expect(items).to_have_count(1)
    expect(items.first).to_contain_text("$10,000")
    expect(page).to_have_url(
        service.url
        + "/ui/users/alice/memories?type=&scope=&state=superseded&project=&tag=&since=&until="
    )
    page.get_by_label("State").select_option("current")
    page.get_by_label("Tag").fill("food")
    page.get_by_role("button", name="Filter").click()
    expect(items).to_have_count(1)
    expect(items.first).to_contain_text("vegetarian")
    page.get_by_label("Tag").fill("")
    page.get_by_label("Type").select_option("preference")
    page.get_by_role("button", name="Filter").click()
    expect(items).to_have_count(1)
    shot(page, "memories")
    page.goto(service.url + "/ui/users/alice/memories?state=current&type=semantic")
    page.get_by_role("link", name="$12,000").click()
    chain = page.get_by_test_id("chain")
    expect(chain).to_contain_text("was “User's monthly budget is $10,000” until")
    expect(chain).to_contain_text("then")
    expect(chain).to_contain_text("now “User's monthly budget is now $12,000”")
    expect(page.get_by_test_id("history")).to_contain_text("add")
    shot(page, "memory")
    page.get_by_test_id("provenance").click()
    marked = page.locator("li.message.marked")
    expect(marked).to_have_count(1)
    expect(marked).to_contain_text("My monthly budget is now $12,000.")
    # The old value's page shows its history: superseded, and by which memory.
    page.go_back()
    page.get_by_test_id("chain").get_by_role("link", name="$10,000").click()
    expect(page.get_by_test_id("history")).to_contain_text("superseded by")
    expect(page.get_by_text("Superseded: no longer true since")).to_be_visible()


def test_filter_with_bad_input_says_so_next_to_the_field(page: Page, service: Service) -> None:
    key = service.new_key("acme")
    service.remember(key, "alice", "Alice is vegetarian")
    login(page, service, key)
    page.goto(service.url + "/ui/users/alice/memories")
    page.get_by_label("Created from (YYYY-MM-DD)").fill("31/01/2026")
    page.get_by_role("button", name="Filter").click()
    field = page.get_by_label("Created from (YYYY-MM-DD)")
    expect(field).to_have_attribute("aria-invalid", "true")
    error = page.locator("#f-since-error")
    expect(error).to_have_text("a day as YYYY-MM-DD")
    expect(field).to_have_attribute("aria-describedby", "f-since-error")
    expect(page.locator("li.memory")).to_have_count(0)
    response = page.request.get(service.url + "/ui/users/alice/memories?since=2026-13-01")
    assert response.status == 400


def test_search_explains_every_step(page: Page, service: Service) -> None:
    key = service.new_key("acme")
    service.remember(key, "alice", "Alice's monthly budget is $12,000", importance=0.9)
    service.remember(key, "alice", "Alice lives in Berlin with two cats")
    login(page, service, key)
    page.goto(service.url + "/ui/users/alice/search")
    page.get_by_label("The user's message").fill("What is my monthly budget?")
    page.get_by_role("button", name="Explain").click()
    expect(page.get_by_test_id("decision")).to_have_text("searched — personal")
    expect(page.get_by_test_id("query")).to_have_text("What is my monthly budget?")
    hits = page.get_by_test_id("hits")
    best = hits.get_by_role("row", name="budget")
    expect(best).to_contain_text("injected")
    cells = best.get_by_role("cell")
    expect(cells).to_have_count(
        8
    )  # cosine, BM25, fused, relevance, recency, importance, final, outcome
    expect(cells.nth(5)).to_have_text("0.90")
    expect(hits.get_by_role("row", name="Berlin")).to_contain_text("under the threshold")
    system = page.get_by_test_id("system-message")
    expect(system).to_contain_text("User's relevant context:")
    expect(system).to_contain_text("Alice's monthly budget is $12,000")
    expect(system).not_to_contain_text("Berlin")
    assert "q=What%20is%20my%20monthly%20budget" in page.url  # htmx pushed the URL
    shot(page, "search")
    page.get_by_label("The user's message").fill("thanks!")
    page.get_by_role("button", name="Explain").click()
    expect(page.get_by_test_id("decision")).to_contain_text("skipped")
    expect(page.get_by_test_id("hits")).to_have_count(0)
    page.get_by_label("Token budget").fill("lots")
    page.get_by_role("button", name="Explain").click()
    expect(page.locator("#f-budget-error")).to_have_text("a whole number from 0 to 100000")


def test_search_token_budget_leaves_out_what_does_not_fit(page: Page, service: Service) -> None:
    key = service.new_key("acme")
    service.remember(key, "alice", "Alice's monthly budget is $12,000")
    login(page, service, key)
    page.goto(service.url + "/ui/users/alice/search?q=What+is+my+monthly+budget%3F&budget=5")
    expect(page.get_by_test_id("hits").get_by_role("row", name="budget")).to_contain_text(
        "kept, over the token budget"
    )
    expect(page.get_by_test_id("system-message")).to_contain_text("None")


def test_memory_page_of_a_stored_memory_id_from_the_list(page: Page, service: Service) -> None:
    key = service.new_key("acme")
    made = service.remember(key, "alice", "Alice's locker code is 8812", tags=["codes"])
    login(page, service, key)
    page.goto(service.url + "/ui/users/alice/memories")
    page.get_by_role("link", name="locker code").click()
    assert memory_id_in(page.url) == made["id"]
    expect(page.get_by_test_id("content")).to_have_text("Alice's locker code is 8812")
    expect(page.get_by_role("row", name="Tags")).to_contain_text("codes")
