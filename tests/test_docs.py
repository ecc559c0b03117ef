"""The documentation: the site builds with warnings as errors (every link and anchor resolves), the flag reference is
what the parsers say, the README stays a front page whose figures the results pages hold, and no page carries a
machine's paths or kilobyte-long lines."""

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

DOCS = os.path.join(ROOT, "docs")
README = open(os.path.join(ROOT, "README.md")).read()
SKIP_DIRS = {".venv", ".git", "site", "runs", "logs", "sweeps", "__pycache__", ".pytest_cache", "node_modules"}


def markdown_files():
    for dirpath, dirnames, files in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")]
        yield from (os.path.join(dirpath, f) for f in files if f.endswith(".md"))


def test_the_site_builds_with_warnings_as_errors(tmp_path):
    """mkdocs-material with ``--strict``: a broken link, a missing anchor, a page missing from the nav
    or a snippet that is not there fails the build."""
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "flags" / "index.html").exists()


def test_the_flag_reference_is_what_the_parsers_say():
    from tools import flagdoc

    assert open(flagdoc.PAGE).read() == flagdoc.page(), "docs/reference/flags.md is stale: python -m tools.flagdoc"


def test_flagdoc_check_says_whether_the_page_is_current(tmp_path, monkeypatch):
    from conftest import in_process
    from tools import flagdoc

    assert in_process(flagdoc.main, "--check").returncode == 0
    stale = tmp_path / "flags.md"
    stale.write_text("# Flags\n")
    monkeypatch.setattr(flagdoc, "PAGE", str(stale))
    done = in_process(flagdoc.main, "--check")
    assert done.returncode == 1 and "out of date" in done.stderr and stale.read_text() == "# Flags\n"
    assert in_process(flagdoc.main).returncode == 0 and stale.read_text() == flagdoc.page()


def test_every_flag_of_main_py_and_gym_eval_is_on_the_reference_page():
    import gym_eval
    from runtime.config import build_parser

    page = open(os.path.join(DOCS, "reference", "flags.md")).read()
    missing = [o for parser in (build_parser(), gym_eval.build_parser()) for a in parser._actions
               for o in a.option_strings if a.dest != "help" and f"`{o}" not in page]
    assert not missing, missing


def test_the_flag_reference_does_not_depend_on_this_machine(monkeypatch):
    """--gpu-ids' default is every visible GPU: the page words it, it does not print this machine's list."""
    from tools import flagdoc

    row = next(line for line in flagdoc.page().splitlines() if "`--gpu-ids" in line)
    assert "| all visible GPUs, else -1 |" in row


def test_no_markdown_line_is_over_1000_characters():
    long = [f"{os.path.relpath(path, ROOT)}:{number}" for path in markdown_files()
            for number, line in enumerate(open(path, encoding="utf-8"), 1) if len(line.rstrip("\n")) > 1000]
    assert not long, long


MACHINE_PATH = re.compile(r"(?<![\w.~])/(?:tmp|work|root|home|Users)/")


def test_no_file_under_docs_names_a_path_of_a_particular_machine():
    """Records and pages (Markdown, JSON, CSV, logs) name folders relative to where a command ran; scripts under
    docs/ may use a scratch folder such as /tmp, as any program does."""
    found = []
    for dirpath, _, files in os.walk(DOCS):
        for name in files:
            if name.endswith((".py", ".sh", ".png", ".gif", ".mp4", ".pt", ".state")):
                continue
            path = os.path.join(dirpath, name)
            with open(path, encoding="utf-8", errors="replace") as f:
                found += [f"{os.path.relpath(path, ROOT)}:{n}" for n, line in enumerate(f, 1)
                          if MACHINE_PATH.search(line)]
    assert not found, found[:20]


def readme_lines():
    return README.splitlines()


def test_the_readme_is_a_front_page():
    lines = readme_lines()
    assert len(lines) <= 220, len(lines)
    long = [n for n, line in enumerate(lines, 1) if len(line) > 300 and not line.startswith("|")]
    assert not long, long
    first_picture = next(n for n, line in enumerate(lines, 1) if line.startswith("!["))
    first_result = next(n for n, line in enumerate(lines, 1) if "docs/results/" in line)
    assert first_picture <= 60 and first_result <= 60, (first_picture, first_result)


def results_rows():
    """The README's results table: each row's cells and the results page its last cell links."""
    start = README.index("\n## Results\n")
    section = README[start : README.index("\n## ", start + 1)]
    rows = [line for line in section.splitlines() if line.startswith("|")][2:]
    assert rows, "the README's Results section has a table"
    for row in rows:
        link = re.search(r"\]\((docs/results/[\w./-]+?\.md)(#[\w-]+)?\)", row)
        assert link, row
        yield row, os.path.join(ROOT, link.group(1))


@pytest.mark.parametrize("row, page", list(results_rows()))
def test_every_figure_the_readme_quotes_is_on_the_results_page_it_links(row, page):
    """Each number of a README results row (scores, minutes, frames/s, ratios) is written on the page the row links
    to, where its command is; a number only the README has is a number that can drift."""
    text = open(page).read().replace(",", "")
    cells = row.strip("|").split(" | ")[:-1]  # the last cell is the link
    numbers = [n.replace(",", "") for cell in cells for n in re.findall(r"(?<![\w.])\d[\d,]*\.?\d*(?![\w])", cell)]
    missing = [n for n in numbers if not re.search(rf"(?<![\d.]){re.escape(n)}(?![\d])", text)]
    assert not missing, (missing, os.path.relpath(page, ROOT))


def sections(path):
    """(heading, level, body lines) of a Markdown page; fenced code is not a heading."""
    out, fenced = [], False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fenced = not fenced
        heading = re.match(r"(#{1,6}) ", line) if not fenced else None
        if heading:
            out.append([line.strip(), len(heading.group(1)), 0])
        elif out:
            out[-1][2] += 1
    return out


RESULT_PAGES = sorted(os.path.join(DOCS, "results", f) for f in os.listdir(os.path.join(DOCS, "results"))
                      if f.endswith(".md"))


@pytest.mark.parametrize("page", RESULT_PAGES, ids=os.path.basename)
def test_results_pages_have_headings_in_order_and_short_sections(page):
    found = sections(page)
    assert found and found[0][1] == 1, "a page starts with its title"
    jumps = [heading for (heading, level, _), (_, before, _) in zip(found[1:], found) if level > before + 1]
    assert not jumps, jumps
    long = [(heading, n) for heading, _, n in found if n > 160]
    assert not long, long
