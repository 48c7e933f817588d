"""The site as a person reads it: Chromium opens the built site, follows every internal
link (pages and their anchors), sees every image load, and searches."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urldefrag

import pytest

from docsite import browser
from tests.servers import require_path

pytestmark = pytest.mark.browser

require_path(Path(browser.CHROMIUM), "scripts/servers installs it")

sync_api = pytest.importorskip("playwright.sync_api")

SEARCHES = {
    "visibility_timeout": "v2",
    "appendfsync": "performance",
    "RedrivePolicy": "sqs-sns",
    "SubscriptionConfirmation": "webhooks",
}


@pytest.fixture(scope="module")
def reader(site: Path) -> Iterator[tuple[str, Any]]:
    with browser.served(site) as url, sync_api.sync_playwright() as pw:
        chromium = browser.launch(pw)
        try:
            tab = chromium.new_page()
            tab.set_default_timeout(15_000)
            yield url, tab
        finally:
            chromium.close()


def test_every_internal_link_leads_somewhere(reader: tuple[str, Any]) -> None:
    root, tab = reader
    pages: dict[str, set[str]] = {}  # page -> the ids on it
    wanted: list[tuple[str, str, str]] = []  # (from, page, anchor)
    todo = [root + "/"]
    broken = []
    while todo:
        page = todo.pop()
        if page in pages:
            continue
        answer = tab.goto(page)
        if answer is None or not answer.ok:
            broken.append((page, answer.status if answer else None))
            pages[page] = set()
            continue
        pages[page] = set(tab.eval_on_selector_all("[id]", "els => els.map(e => e.id)"))
        unloaded = tab.eval_on_selector_all(
            "img", "els => els.filter(e => !(e.complete && e.naturalWidth > 0)).map(e => e.src)"
        )
        assert unloaded == [], (page, unloaded)
        for href in tab.eval_on_selector_all("a[href]", "els => els.map(e => e.href)"):
            target, anchor = urldefrag(href)
            if not target.startswith(root):
                continue
            todo.append(target)
            if anchor:
                wanted.append((page, target, anchor))
    assert broken == []
    assert len(pages) >= 35
    dead = [(src, page, a) for src, page, a in wanted if a not in pages.get(page, set())]
    assert dead == []


@pytest.mark.parametrize(("term", "page"), SEARCHES.items())
def test_the_search_finds(reader: tuple[str, Any], term: str, page: str) -> None:
    root, tab = reader
    with tab.expect_response(lambda answer: answer.url.endswith("/search_index.json")):
        tab.goto(root + "/")
    tab.click("label.md-search__icon, .md-search__input")
    # Keys pressed as a reader presses them: the search answers keyboard input.
    tab.keyboard.type(term, delay=20)
    results = tab.locator(".md-search-result__item a")
    results.first.wait_for()
    hrefs = [results.nth(i).get_attribute("href") or "" for i in range(results.count())]
    assert any(f"/{page}/" in href for href in hrefs), hrefs
