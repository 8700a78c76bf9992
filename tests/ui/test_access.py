"""Who sees what in the inspector: keys and tenants as in the API, roles, the session
cookie, CSRF, and untrusted text shown as text (issue 11.9)."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.ui.conftest import ADMIN_KEY, Service, ServiceMaker, choose_tenant, login, shot

XSS = "<script>alert(1)</script> [/] [link=http://evil]click[/link] <img src=x onerror=alert(2)>"


#: The secret as shown: no hex digits' run, so a memory id on a 404 page never matches it
#: (an id holding "4711" once failed this test).
CODE = "QZ-4711"


def test_a_tenant_key_cannot_reach_another_tenants_pages(page: Page, service: Service) -> None:
    acme, globex = service.new_key("acme"), service.new_key("globex")
    secret = service.remember(globex, "gina", f"Gina's door code is {CODE}")
    service.say(globex, "gina", "g1", [{"role": "user", "content": f"door code {CODE}"}])
    login(page, service, acme)
    expect(page.get_by_test_id("tenant")).to_have_text("acme")
    expect(page.get_by_text("gina")).to_have_count(0)
    for path in (
        f"/ui/users/gina/memories/{secret['id']}",
        "/ui/users/gina/sessions/g1",
        f"/ui/users/gina/memories/{secret['id']}/forget",
    ):
        answer = page.goto(service.url + path)
        assert answer is not None and answer.status == 404, path
        expect(page.get_by_text(CODE)).to_have_count(0)
    page.goto(service.url + "/ui/users/gina/memories")
    expect(page.locator("li.memory")).to_have_count(0)
    page.goto(service.url + "/ui/users/gina/search?q=what+is+my+door+code")
    expect(page.get_by_test_id("hits")).not_to_contain_text(CODE)
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    edit = page.request.post(
        f"{service.url}/ui/users/gina/memories/{secret['id']}/edit",
        form={"csrf": csrf or "", "content": "hacked", "importance": "0.5", "confidence": "1"},
    )
    assert edit.status == 404
    chosen = page.request.post(
        service.url + "/ui/tenant", form={"csrf": csrf or "", "tenant_id": "globex"}
    )
    assert chosen.status == 403
    page.goto(service.url + "/ui/users")
    expect(page.get_by_test_id("tenant")).to_have_text("acme")
    export = page.request.get(service.url + "/ui/users/gina/export")
    assert export.text() == ""
    assert service.api("GET", f"/v1/memory/{secret['id']}", globex).json()["content"]["raw"] == (
        f"Gina's door code is {CODE}"
    )


def test_the_admin_chooses_the_tenant(page: Page, service: Service) -> None:
    acme, globex = service.new_key("acme"), service.new_key("globex")
    service.remember(acme, "alice", "Alice likes tea")
    service.remember(globex, "gina", "Gina likes coffee")
    login(page, service, ADMIN_KEY)
    expect(page).to_have_url(service.url + "/ui/tenant")
    choose_tenant(page, "globex")
    expect(page.get_by_role("link", name="gina")).to_be_visible()
    expect(page.get_by_role("link", name="alice")).to_have_count(0)
    page.goto(service.url + "/ui/tenant")
    choose_tenant(page, "acme")
    expect(page.get_by_role("link", name="alice")).to_be_visible()


def test_a_role_restricted_memory_is_hidden_from_a_key_without_the_role(
    page: Page, service: Service
) -> None:
    plain, hr = service.new_key("acme"), service.new_key("acme", ["hr"])
    service.remember(plain, "alice", "Alice likes tea")
    salary = service.remember(
        hr, "alice", "Salary review: alice gets a 3% raise", allowed_roles=["hr"]
    )
    login(page, service, plain)
    expect(page.get_by_role("row", name="alice")).to_contain_text("1")
    page.goto(service.url + "/ui/users/alice/memories")
    expect(page.locator("li.memory")).to_have_count(1)
    expect(page.get_by_text("Salary")).to_have_count(0)
    answer = page.goto(f"{service.url}/ui/users/alice/memories/{salary['id']}")
    assert answer is not None and answer.status == 404
    page.goto(service.url + "/ui/users/alice/search?q=What+about+my+salary+review%3F&threshold=0")
    expect(page.get_by_test_id("decision")).to_contain_text("searched")
    expect(page.locator("main")).not_to_contain_text("raise")
    page.goto(service.url + "/ui/users/alice")
    expect(page.get_by_role("link", name="Memories (1, 1 current)")).to_be_visible()
    page.context.clear_cookies()
    login(page, service, hr)
    page.goto(f"{service.url}/ui/users/alice/memories/{salary['id']}")
    expect(page.get_by_test_id("content")).to_contain_text("3% raise")


def test_untrusted_text_renders_as_text(page: Page, service: Service) -> None:
    key = service.new_key("acme")
    made = service.remember(key, "alice", XSS, tags=["x"])
    service.say(key, "alice", "s1", [{"role": "user", "content": XSS}])
    login(page, service, key)
    for path in (
        "/ui/users",
        "/ui/users/alice/memories",
        f"/ui/users/alice/memories/{made['id']}",
        "/ui/users/alice/sessions/s1",
        "/ui/users/alice/search?q=script+alert+click&threshold=0",
        f"/ui/users/alice/memories/{made['id']}/forget",
    ):
        page.goto(service.url + path)
        assert page.locator("main script, main img").count() == 0, path
    page.goto(f"{service.url}/ui/users/alice/memories/{made['id']}")
    expect(page.get_by_test_id("content")).to_have_text(XSS)
    expect(page.locator("a[href='http://evil']")).to_have_count(0)
    page.goto(service.url + "/ui/users/alice/search?q=script+alert+click&threshold=0")
    expect(page.get_by_test_id("system-message")).to_contain_text("<script>alert(1)</script> [/]")
    shot(page, "escaped")
    # the page fixture fails the test if any dialog fired


def test_login_cookie_is_httponly_strict_and_the_key_never_in_a_url(
    page: Page, service: Service
) -> None:
    key = service.new_key("acme")
    urls: list[str] = []
    page.on("request", lambda r: urls.append(r.url))
    answer = page.goto(service.url + "/ui/users")
    assert answer is not None and page.url == service.url + "/ui/login"
    page.get_by_label("API key").fill("cm-not-a-key")
    page.get_by_role("button", name="Log in").click()
    expect(page.locator("#key-error")).to_have_text("unknown or revoked key")
    shot(page, "login")
    login(page, service, key)
    cookies = {c["name"]: c for c in page.context.cookies()}
    session = cookies["chatmem_ui"]
    assert session["httpOnly"] and session["sameSite"] == "Strict" and session["path"] == "/ui"
    assert key not in session["value"]
    assert not any(key in url for url in urls)
    assert page.evaluate("document.cookie") == ""
    headers = page.request.get(service.url + "/ui/users").headers
    assert "script-src 'self'" in headers["content-security-policy"]


def test_posts_need_the_sessions_csrf_token(page: Page, service: Service) -> None:
    key = service.new_key("acme")
    made = service.remember(key, "alice", "Alice likes tea")
    login(page, service, key)
    url = f"{service.url}/ui/users/alice/memories/{made['id']}/edit"
    fields = {"content": "Alice likes coffee", "importance": "0.5", "confidence": "1"}
    assert page.request.post(url, form=fields).status == 403
    assert page.request.post(url, form={**fields, "csrf": "forged"}).status == 403
    assert service.api("GET", f"/v1/memory/{made['id']}", key).json()["metadata"]["version"] == 1


def test_a_revoked_key_is_logged_out(page: Page, service: Service) -> None:
    made = service.api("POST", "/v1/admin/keys", ADMIN_KEY, json={"tenant_id": "acme"}).json()
    login(page, service, made["key"])
    expect(page).to_have_url(service.url + "/ui/users")
    service.api("DELETE", f"/v1/admin/keys/{made['key_id']}", ADMIN_KEY)
    page.goto(service.url + "/ui/users")
    expect(page).to_have_url(service.url + "/ui/login")


def test_the_anonymous_tenant_needs_no_login(page: Page, make_service: ServiceMaker) -> None:
    service = make_service(auth={"anonymous_tenant": "default"})
    service.remember(ADMIN_KEY, "alice", "Alice likes tea", headers={"X-Chatmem-Tenant": "default"})
    page.goto(service.url + "/ui/users")
    expect(page.get_by_test_id("tenant")).to_have_text("default")
    page.get_by_role("link", name="alice").click()
    page.get_by_role("link", name="Memories (1, 1 current)").click()
    expect(page.locator("li.memory")).to_have_count(1)
