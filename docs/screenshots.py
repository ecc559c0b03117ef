"""The documentation site as a reader sees it: build it, serve it on localhost, open pages in a real headless browser.

    python docs/screenshots.py OUT                      # every page of the nav: OUT/<page>.png, and a check of each
    python docs/screenshots.py OUT index results/atari  # these pages only

Needs Chromium (Debian's ``chromium`` package, or CHROMIUM=/path/to/chrome). For each page the browser renders
the served HTML (a window of 1280 x 2000 pixels, the top of a long page) and its DOM is read back: the page must have
its title, the navigation and no element that mkdocs-material marks as missing. Exit 1 names the pages that failed.
"""

import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def nav_pages(nav) -> list[str]:
    """The nav's pages, as paths without ``.md`` (``results/atari``)."""
    pages = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        pages += nav_pages(value) if isinstance(value, list) else [value.removesuffix(".md")]
    return pages


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def chromium(browser: str, profile: str, *args: str) -> str:
    return subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                          timeout=120).stdout


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    out, wanted = os.path.abspath(argv[0]), argv[1:]
    browser = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("google-chrome")
    if not browser:
        print("screenshots.py: no Chromium: install Debian's chromium, or set CHROMIUM", file=sys.stderr)
        return 2

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("", lambda loader, suffix, node: None)  # mkdocs' !!python tags: not needed here
    config = yaml.load(open(os.path.join(ROOT, "mkdocs.yml")), Loader=Loader)
    pages = wanted or nav_pages(config["nav"])
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        site = os.path.join(scratch, "site")
        subprocess.run([sys.executable, "-m", "mkdocs", "build", "--quiet", "--site-dir", site],  # the tests build strict
                       cwd=ROOT, check=True)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=site))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        failed = []
        try:
            for page in pages:
                path = "" if page == "index" else f"{page.removesuffix('/index')}/" if page.endswith("index") \
                    else f"{page}/"
                url = f"http://127.0.0.1:{server.server_address[1]}/{path}"
                shot = os.path.join(out, page.replace("/", "_") + ".png")
                chromium(browser, os.path.join(scratch, "profile"), "--window-size=1280,2000",
                         f"--screenshot={shot}", url)
                dom = chromium(browser, os.path.join(scratch, "profile"), "--dump-dom", url)
                title = re.search(r"<h1[^>]*>(.*?)</h1>", dom, re.S)
                ok = title and "md-nav" in dom and os.path.exists(shot) and "404" not in title.group(1)
                heading = re.sub("<[^>]+>|¶", "", title.group(1)).strip() if title else "no title"
                print(f"{'ok  ' if ok else 'FAIL'} {page}: {heading}")
                if not ok:
                    failed.append(page)
        finally:
            server.shutdown()
    if failed:
        print(f"screenshots.py: {len(failed)} page(s) failed: {' '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
