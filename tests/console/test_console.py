"""The web console in a real browser: Debian's Chromium driven by Playwright."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from docsite import browser as chromium
from dynamiq.testing.endpoint import Receiver
from tests.conftest import NodeFactory
from tests.servers import require_path
from tests.waiting import until

pytestmark = pytest.mark.browser

CHROMIUM = chromium.CHROMIUM
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"

require_path(Path(CHROMIUM), "scripts/servers installs it")

sync_api = pytest.importorskip("playwright.sync_api")


ADMIN_KEY = "the-consoles-administrators-key-0123456789abcdef"


@pytest.fixture(params=[False])
def page(node_factory: NodeFactory, request: pytest.FixtureRequest) -> Iterator[Any]:
    keys = ("--auth-enabled", "true", "--auth-adminkey", ADMIN_KEY) if request.param else ()
    node = node_factory(*keys).start()
    with sync_api.sync_playwright() as pw:
        browser = chromium.launch(pw)
        try:
            tab = browser.new_page()
            tab.set_default_timeout(10_000)
            tab.goto(node.url + "/")
            yield tab
        finally:
            browser.close()


def test_create_publish_watch_peek_delete(page: Any) -> None:
    expect = sync_api.expect
    # Create a queue: it appears in the table and is selected
    page.get_by_label("new queue name").fill("orders")
    page.get_by_role("button", name="Create queue").click()
    row = page.locator("#queues tbody tr[data-queue=orders]")
    expect(row).to_be_visible()
    expect(page.locator("#queue-name")).to_have_text("orders")
    # Publish a test message: the depth goes to 1
    page.get_by_label("message body").fill('{"order": 42}')
    page.get_by_role("button", name="Publish to queue").click()
    expect(row.locator("td.depth")).to_have_text("1")
    # Peek at it without leasing
    page.get_by_role("button", name="Peek at messages").click()
    message = page.locator("#messages tbody tr")
    expect(message).to_have_count(1)
    expect(message.locator("td.body")).to_have_text('{"order": 42}')
    # A bad setting is refused and the API's message is shown
    page.locator("#settings input[name=min_partitions]").fill("20")
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator("#error")).to_contain_text("min_partitions")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "console.png"), full_page=True)
    # Delete the message: the depth goes back to 0
    message.get_by_role("button", name="Delete").click()
    expect(row.locator("td.depth")).to_have_text("0")


def test_purge_asks_first_and_empties_the_queue(page: Any) -> None:
    expect = sync_api.expect
    page.get_by_label("new queue name").fill("jobs")
    page.get_by_role("button", name="Create queue").click()
    row = page.locator("#queues tbody tr[data-queue=jobs]")
    for body in ("one", "two"):
        page.get_by_label("message body").fill(body)
        page.get_by_role("button", name="Publish to queue").click()
    expect(row.locator("td.depth")).to_have_text("2")
    # Declining the confirmation changes nothing
    asked: list[str] = []

    def answer(accept: bool) -> Any:
        def handle(dialog: Any) -> None:
            asked.append(dialog.message)
            dialog.accept() if accept else dialog.dismiss()

        return handle

    page.once("dialog", answer(False))
    page.get_by_role("button", name="Purge queue").click()
    page.get_by_role("button", name="Peek at messages").click()
    expect(page.locator("#messages tbody tr")).to_have_count(2)
    assert asked and "jobs" in asked[0]
    # Accepting it drops both messages
    page.once("dialog", answer(True))
    page.get_by_role("button", name="Purge queue").click()
    expect(page.locator("#purged")).to_have_text("purged 2 messages")
    expect(row.locator("td.depth")).to_have_text("0")


def test_a_dead_letter_queue_is_shown_and_redriven(page: Any) -> None:
    expect = sync_api.expect
    url = page.url.rstrip("/")
    _call(url, "PUT", "/v2/queues/jobs-dead")
    settings = {"visibility_timeout": 0.2, "max_receives": 1, "dead_letter_queue": "jobs-dead"}
    _call(url, "PUT", "/v2/queues/jobs", settings)
    _call(url, "POST", "/v2/queues/jobs/messages", {"messages": [{"body": "a"}, {"body": "b"}]})
    got = _call(url, "POST", "/v2/queues/jobs/receive", {"max_messages": 10})
    assert len(got["messages"]) == 2  # their one lease lapses: they are dead-lettered
    until(
        lambda: _call(url, "GET", "/v2/queues/jobs-dead")["stats"]["depth"] == 2,
        what="two dead letters",
    )
    page.reload()
    page.get_by_role("button", name="jobs", exact=True).click()
    expect(page.locator("#dead-letters")).to_have_text(
        "Dead-letter queue: jobs-dead, holding 2 messages (after 1 receives)"
    )
    # Redrive the dead-letter queue from its own panel: both go back to jobs
    page.get_by_role("button", name="jobs-dead", exact=True).click()
    page.get_by_role("button", name="Redrive to source queues").click()
    expect(page.locator("#redrive-status")).to_have_text("redrive done: 2 moved, 0 remaining")
    expect(page.locator("#queues tbody tr[data-queue=jobs] td.depth")).to_have_text("2")
    expect(page.locator("#queues tbody tr[data-queue=jobs-dead] td.depth")).to_have_text("0")


def _call(url: str, method: str, path: str, body: Any = None) -> Any:
    """A plain HTTP call (the Playwright sync API owns this thread's event loop)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_subscriptions_are_shown_and_edited_and_attributes_peeked(page: Any) -> None:
    expect = sync_api.expect
    url = page.url.rstrip("/")
    for queue in ("all", "eu"):
        _call(url, "PUT", f"/v2/queues/{queue}")
    _call(url, "PUT", "/v2/topics/orders")
    _call(url, "PUT", "/v2/topics/orders/subscriptions/all")
    page.reload()
    row = page.locator("#topics tbody tr[data-topic=orders]")
    expect(row.locator(".subscription")).to_have_count(1)
    # Subscribe eu with a pattern and a filter through the form
    form = page.locator("#subscription")
    form.get_by_label("subscription topic").select_option("orders")
    form.get_by_label("subscription queue").select_option("eu")
    form.get_by_label("subscription pattern").fill("orders.eu.*")
    form.get_by_label("subscription filter").fill('{"tier": [{"prefix": "gold"}]}')
    page.get_by_role("button", name="Save subscription").click()
    eu = row.locator(".subscription[data-queue=eu]")
    expect(eu).to_contain_text('orders.eu.* {"tier":[{"prefix":"gold"}]}')
    # A bad filter is refused with the API's words, and changes nothing
    eu.get_by_role("button", name="Edit").click()
    expect(form.get_by_label("subscription pattern")).to_have_value("orders.eu.*")
    form.get_by_label("subscription filter").fill('{"tier": {"suffix": 1}}')
    page.get_by_role("button", name="Save subscription").click()
    expect(page.locator("#error")).to_contain_text("filter: suffix match pattern must be")
    expect(eu).to_contain_text("prefix")
    # Publish through the topic with a routing key: only what matches reaches eu
    publish = row.get_by_label("message for orders")
    publish.fill("#42")
    row.get_by_label("routing key for orders").fill("orders.us.created")
    row.get_by_role("button", name="Publish").click()
    expect(page.locator("#queues tbody tr[data-queue=all] td.depth")).to_have_text("1")
    expect(page.locator("#queues tbody tr[data-queue=eu] td.depth")).to_have_text("0")
    # Attributes and routing keys show in a peek
    message = {"body": "#43", "routing_key": "orders.eu.new", "attributes": {"tier": "gold"}}
    _call(url, "POST", "/v2/topics/orders/messages", {"messages": [message]})
    page.get_by_role("button", name="eu", exact=True).click()
    page.get_by_role("button", name="Peek at messages").click()
    peeked = page.locator("#messages tbody tr")
    expect(peeked).to_have_count(1)
    expect(peeked.locator("td.key")).to_have_text("orders.eu.new")
    expect(peeked.locator("td.attributes")).to_have_text('{"tier":"gold"}')


def test_dedup_and_auto_delete_settings_are_shown_and_saved(page: Any) -> None:
    expect = sync_api.expect
    url = page.url.rstrip("/")
    _call(url, "PUT", "/v2/queues/staging", {"expires_after_seconds": 600})
    page.reload()
    page.get_by_role("button", name="staging", exact=True).click()
    expect(page.locator("#expiry")).to_contain_text("Deleted if unused until")
    expect(page.locator("#expiry")).to_contain_text("expires_after_seconds: 600")
    form = page.locator("#settings")
    expect(form.locator("input[name=dedup_window_seconds]")).to_have_value("300")
    form.locator("input[name=dedup_window_seconds]").fill("60")
    form.locator("input[name=content_dedup]").check()
    form.locator("input[name=expires_after_seconds]").fill("")  # empty: never
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator("#expiry")).to_have_text("Does not delete itself.")
    saved = _call(url, "GET", "/v2/queues/staging")
    assert "expires_at" not in saved
    assert {k: saved["settings"][k] for k in ("dedup_window_seconds", "content_dedup")} == {
        "dedup_window_seconds": 60,
        "content_dedup": True,
    }
    assert saved["settings"]["expires_after_seconds"] is None


@pytest.mark.parametrize("page", [True], indirect=True)
def test_a_node_that_needs_keys_asks_for_one_and_keeps_it_in_the_tab(page: Any) -> None:
    expect = sync_api.expect
    login = page.locator("#login")
    expect(login).to_be_visible()
    expect(page.locator("#error")).to_be_hidden()
    page.get_by_label("key", exact=True).fill("dq0000000000000000.wrong")
    page.get_by_role("button", name="Log in").click()
    expect(page.locator("#login-refused")).to_be_visible()
    page.get_by_label("key", exact=True).fill(ADMIN_KEY)
    page.get_by_role("button", name="Log in").click()
    expect(login).to_be_hidden()
    page.get_by_label("new queue name").fill("keyed")
    page.get_by_role("button", name="Create queue").click()
    expect(page.locator("#queues tbody tr[data-queue=keyed]")).to_be_visible()
    assert ADMIN_KEY not in page.url
    assert page.evaluate("sessionStorage.getItem('dynamiq.key')") == ADMIN_KEY
    page.get_by_role("button", name="Log out").click()
    expect(login).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('dynamiq.key')") is None


@pytest.mark.parametrize("page", [True], indirect=True)
def test_an_administrator_issues_a_key_with_an_aws_credential_and_revokes_it(page: Any) -> None:
    expect = sync_api.expect
    page.get_by_label("key", exact=True).fill(ADMIN_KEY)
    page.get_by_role("button", name="Log in").click()
    panel = page.locator("#keys-panel")
    expect(panel).to_be_visible()
    page.get_by_label("key application").fill("shop")
    page.get_by_label("key role").select_option("produce")
    page.get_by_label("with an AWS credential").check()
    page.get_by_role("button", name="Create key").click()
    shown = page.locator("#new-key")
    expect(shown).to_be_visible()
    access = page.locator("#new-key-access").inner_text()
    secret = page.locator("#new-key-secret").inner_text()
    assert access.startswith("AKIA") and len(access) == 20 and len(secret) == 40
    row = page.locator("#keys tbody tr", has_text=access)
    expect(row).to_contain_text("shop")
    expect(row).to_contain_text("produce")
    assert secret not in page.locator("#keys").inner_text()  # listed, never its secret
    # The credential signs: boto3 lists the application's queues with it.
    import boto3

    sqs = boto3.client(
        "sqs",
        endpoint_url=page.url.rstrip("/"),
        region_name="us-east-1",
        aws_access_key_id=access,
        aws_secret_access_key=secret,
    )
    try:
        assert sqs.list_queues().get("QueueUrls", []) == []
        page.once("dialog", lambda dialog: dialog.accept())
        row.get_by_role("button", name="Revoke").click()
        expect(row).to_have_count(0)
        with pytest.raises(Exception, match="InvalidClientTokenId"):
            sqs.list_queues()
    finally:
        sqs.close()


def test_webhooks_are_added_shown_with_their_state_and_removed(page: Any) -> None:
    expect = sync_api.expect
    url = page.url.rstrip("/")
    receiver = Receiver(lambda d: 503 if d.kind == "Notification" else 200)
    try:
        _call(url, "PUT", "/v2/topics/orders")
        page.reload()
        form = page.locator("#webhook")
        form.get_by_label("webhook topic").select_option("orders")
        form.get_by_label("webhook URL").fill(receiver.url)
        page.get_by_role("button", name="Add webhook").click()
        hook = page.locator("#topics tbody tr[data-topic=orders] .webhook")
        expect(hook).to_contain_text(receiver.url)
        expect(hook.locator(".state")).to_have_text("pending")
        asked = receiver.wait_for("SubscriptionConfirmation")[0].document()
        with urllib.request.urlopen(asked["SubscribeURL"], timeout=10):
            pass
        _call(url, "POST", "/v2/topics/orders/messages", {"messages": [{"body": "x"}]})
        receiver.wait_for("Notification")  # refused with 503: retried in 20 s
        page.reload()
        expect(hook.locator(".state")).to_have_text("failing")
        expect(hook).to_contain_text("0 pending, 1 in flight")
        hook.get_by_role("button", name="\u00d7").click()
        expect(hook).to_have_count(0)
    finally:
        receiver.close()


def test_many_queues_come_a_page_at_a_time_searched_and_busiest_first(page: Any) -> None:
    expect = sync_api.expect
    url = page.url.rstrip("/")
    names = [f"tenant-{i:03}" for i in range(250)]
    for name in names:
        _call(url, "PUT", f"/v2/queues/{name}")
    for _ in range(3):
        _call(url, "POST", "/v2/queues/tenant-217/messages", {"messages": [{"body": "x"}]})
    _call(url, "POST", "/v2/queues/tenant-042/messages", {"messages": [{"body": "x"}]})
    page.reload()
    rows = page.locator("#queues tbody tr")
    count = page.locator("#queue-count")
    back = page.get_by_role("button", name="Previous")
    forward = page.get_by_role("button", name="Next")
    expect(count).to_have_text("1-100; 250 queues in all")
    expect(rows).to_have_count(100)
    expect(rows.first).to_have_attribute("data-queue", "tenant-000")
    expect(back).to_be_disabled()
    forward.click()
    expect(count).to_have_text("101-200; 250 queues in all")
    expect(rows.first).to_have_attribute("data-queue", "tenant-100")
    forward.click()
    expect(count).to_have_text("201-250; 250 queues in all")
    expect(rows).to_have_count(50)
    expect(forward).to_be_disabled()
    back.click()
    expect(rows.first).to_have_attribute("data-queue", "tenant-100")
    # A search starts again at its first page
    page.get_by_label("search queues by prefix").fill("tenant-21")
    expect(count).to_have_text('1-10 starting with "tenant-21"; 250 queues in all')
    expect(rows).to_have_count(10)
    expect(forward).to_be_disabled()
    page.get_by_label("search queues by prefix").fill("")
    # The busiest first: the queues in use, the most used first
    page.get_by_label("busiest first").check()
    expect(count).to_have_text("the 2 busiest; 250 queues in all")
    expect(rows.first).to_have_attribute("data-queue", "tenant-217")
    expect(rows.nth(1)).to_have_attribute("data-queue", "tenant-042")
    expect(forward).to_be_disabled()
