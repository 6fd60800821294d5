"""The documentation: generated blocks up to date, relative links that resolve, README's two
commands unchanged, and nothing that points outside the repository."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} +(.+?) *#*$")


def _gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _prose(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    out, fence = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if not fence:
            out.append(line)
    return out


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in _prose(page.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if m:
            s = _slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    return out


def test_generated_blocks_are_current():
    stale = _gen_docs().run(check=True)
    assert not stale, "stale generated blocks (run python scripts/gen_docs.py): " + ", ".join(stale)


def test_relative_links_resolve():
    anchors: dict[Path, set[str]] = {}
    bad = []
    for page in PAGES:
        if not page.exists():
            continue
        for _n, line in enumerate(_prose(page.read_text(encoding="utf-8")), 1):
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                path, _, anchor = target.partition("#")
                dest = (page.parent / path).resolve() if path else page
                where = f"{page.relative_to(ROOT)}: {target}"
                if not dest.exists():
                    bad.append(f"{where} (no such file)")
                    continue
                if anchor and dest.suffix == ".md":
                    if dest not in anchors:
                        anchors[dest] = _anchors(dest)
                    if anchor not in anchors[dest]:
                        bad.append(f"{where} (no such anchor)")
    assert not bad, "broken links:\n" + "\n".join(bad)


def test_readme_keeps_the_two_commands():
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)
    assert blocks[:2] == [
        "pip install -e . && planner plan --model 70b --gpus 2048\n",
        "pip install -e '.[test]' && python -m pytest\n",
    ]


def test_readme_is_short():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) < 300


OUTSIDE = "../" + "shared"  # spelled in two parts so that this file does not match itself


def test_nothing_points_outside_the_repository():
    files = [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    for folder in ("docs", "planner", "tests", "benchmarks", "examples"):
        files += [p for p in (ROOT / folder).rglob("*") if p.is_file()]
    hits = []
    for p in files:
        if p.suffix in {".pyc"} or not p.exists():
            continue
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if OUTSIDE in line:
                hits.append(f"{p.relative_to(ROOT)}:{n}")
    assert not hits, "paths outside the repository:\n" + "\n".join(hits)
