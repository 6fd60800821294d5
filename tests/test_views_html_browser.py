"""The HTML report in a real browser: headless Chromium opens it with every network request
refused, logs no console message, and its screenshot shows the schedule's colours.

Marked `browser`; skipped when no Chromium is installed (Debian: `apt-get install chromium`),
unless PLANNER_REQUIRE_BROWSER=1 (CI sets it), where a missing browser fails the test."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.views.pictures import KINDS

pytestmark = pytest.mark.browser

EXAMPLE_70B = Path(__file__).resolve().parent.parent / "examples" / "llama3-70b-2048xh100.yaml"
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _browser() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("PLANNER_REQUIRE_BROWSER") == "1":
        pytest.fail("no Chromium on PATH and PLANNER_REQUIRE_BROWSER=1 (apt-get install chromium)")
    pytest.skip("no Chromium installed (apt-get install chromium)")


def _chromium(page: Path, *extra: str, tmp: Path) -> subprocess.CompletedProcess:
    """Headless, offline: every host resolves to nothing and the proxy is a closed port."""
    args = [
        _browser(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--proxy-server=127.0.0.1:9",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--user-data-dir={tmp / 'profile'}",
        "--enable-logging=stderr",
        "--v=0",
        *extra,
        page.as_uri(),
    ]
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def _console_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def _png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB(A) bytes) of an 8-bit non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos : pos + 8])
        chunk = data[pos + 8 : pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
            assert depth == 8 and interlace == 0 and colour in (2, 6)
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, bpp, rows


def _count(rows, bpp: int, hex_colour: str) -> int:
    want = bytes.fromhex(hex_colour.lstrip("#"))
    return sum(sum(1 for i in range(0, len(r), bpp) if r[i : i + 3] == want) for r in rows)


def test_console_errors_are_detected(tmp_path):
    """The check below can fail: a page with a script error logs a CONSOLE line."""
    page = tmp_path / "bad.html"
    page.write_text("<!DOCTYPE html><html><body><script>undefined_fn();</script></body></html>")
    proc = _chromium(page, "--dump-dom", tmp=tmp_path)
    assert any("undefined_fn" in line for line in _console_lines(proc.stderr)), proc.stderr[-2000:]


def test_a_fetch_is_refused_offline(tmp_path):
    """And a page that needs the network shows it: the request fails and is logged."""
    page = tmp_path / "net.html"
    page.write_text(
        '<!DOCTYPE html><html><body><script>fetch("http://example.invalid/x")'
        '.catch(e => console.error("offline: " + e))</script></body></html>'
    )
    proc = _chromium(page, "--dump-dom", "--virtual-time-budget=3000", tmp=tmp_path)
    assert any("offline" in line for line in _console_lines(proc.stderr)), proc.stderr[-2000:]


def test_report_opens_offline_without_console_messages_and_shows_the_schedule(tmp_path):
    report = tmp_path / "report.html"
    r = CliRunner().invoke(app, ["validate", str(EXAMPLE_70B), "--html", str(report)])
    assert r.exit_code == 0, r.output
    dom = _chromium(report, "--dump-dom", tmp=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert _console_lines(dom.stderr) == []
    assert "Pipeline schedule" in dom.stdout and dom.stdout.count('data-kind="F"') == 64
    shot = tmp_path / "shot.png"
    proc = _chromium(report, f"--screenshot={shot}", "--window-size=1100,900", tmp=tmp_path)
    assert shot.exists(), proc.stderr[-2000:]
    _, bpp, rows = _png_pixels(shot.read_bytes())
    # forward and backward have colours of their own (pictures.KINDS): 64 blocks each on
    # the page, backward twice as long as forward
    forward, backward = _count(rows, bpp, KINDS["F"][0]), _count(rows, bpp, KINDS["B"][0])
    assert forward > 3000 and backward > 1.5 * forward
