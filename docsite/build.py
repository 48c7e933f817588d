"""Build the documentation site strictly (``make docs``): a broken link, a missing page or
an unknown anchor fails the build. Then the home page's screenshot in ``docs/assets/``
is refreshed from the built site, where Chromium is installed.

``python -m docsite.build [--site DIR] [--no-screenshot]``
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from mkdocs.commands.build import build
from mkdocs.config import load_config
from mkdocs.exceptions import Abort

from docsite import browser

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOT = ROOT / "docs" / "assets" / "home.png"


def build_site(site: Path) -> None:
    """Build the site into ``site``; warnings fail it (MkDocs's strict mode)."""
    config = load_config(str(ROOT / "mkdocs.yml"), strict=True, site_dir=str(site))
    build(config)


def screenshot(site: Path, target: Path = SCREENSHOT) -> bool:
    """Photograph the built home page into ``target``; False without Chromium."""
    if not Path(browser.CHROMIUM).exists():
        return False
    from playwright.sync_api import sync_playwright

    with browser.served(site) as url, sync_playwright() as pw:
        chromium = browser.launch(pw)
        try:
            tab = chromium.new_page(viewport={"width": 1280, "height": 800})
            tab.goto(url + "/")
            tab.screenshot(path=str(target))
        finally:
            chromium.close()
    return True


def main(argv: list[str] | None = None) -> int:
    options = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    options.add_argument("--site", type=Path, default=ROOT / "site")
    options.add_argument("--no-screenshot", action="store_true")
    args = options.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="docs: %(levelname)s %(message)s")
    try:
        build_site(args.site)
    except Abort as exc:
        print(f"docs: {exc}", file=sys.stderr)
        return 1
    if not args.no_screenshot and not screenshot(args.site):
        print("docsite: chromium not found, home page screenshot left as it was", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
