"""The HTML report: one self-contained file (no script, nothing fetched), the schedule drawn
block by block from the same schedule as the terminal, the plan's scatter and compare."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.config import load_config
from planner.views.pictures import schedule_picture

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
EXAMPLE_70B = EXAMPLES / "llama3-70b-2048xh100.yaml"


def _invoke(*args):
    return CliRunner(env={"COLUMNS": "120", "NO_COLOR": "1"}).invoke(app, list(args))


def _self_contained(text: str) -> None:
    """Nothing to fetch: no script, no external stylesheet, image, font or link target."""
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert "<script" not in text.lower()
    assert not re.search(r'(?:src|href)\s*=\s*["\']?(?!#)', text, re.I)
    assert not re.search(r"url\(|@import", text, re.I)
    # the only URL is the SVG namespace, which browsers never fetch
    assert set(re.findall(r"https?://[^\s\"'<>]+", text)) <= {"http://www.w3.org/2000/svg"}


def test_validate_html_is_self_contained_and_draws_every_block(tmp_path):
    out = tmp_path / "report.html"
    r = _invoke("validate", str(EXAMPLE_70B), "--html", str(out))
    assert r.exit_code == 0, r.output
    assert f"wrote {out}" in r.stderr
    text = out.read_text(encoding="utf-8")
    _self_contained(text)
    # p x m forward and as many backward blocks: 4 x 16 each (the chapter's example)
    assert text.count('data-kind="F"') == 64 and text.count('data-kind="B"') == 64
    assert "(4-1)/16 = 19%" in text
    for fig in ("schedule", "memory", "time", "grid"):
        assert f'<figure id="{fig}">' in text
    assert text.count("<svg") == 4


def test_html_schedule_blocks_are_the_schedules(tmp_path):
    """Block positions in the SVG are the simulated schedule's start times, scaled."""
    from planner.views.html import LABEL, W, svg_schedule

    job, lay = load_config(EXAMPLE_70B)
    pic = schedule_picture(job, lay)
    svg = svg_schedule(pic)
    xs = [float(x) for x in re.findall(r'<rect x="([\d.]+)"[^>]*class="blk"', svg)]
    k = (W - LABEL - 10) / pic.schedule.makespan
    want = [LABEL + b.start * k for b in pic.schedule.blocks]
    assert len(xs) == len(want)
    assert all(abs(a - b) < 0.06 for a, b in zip(xs, want))


def test_big_schedules_are_drawn_as_runs(tmp_path):
    """Beyond MAX_BLOCKS the schedule is cells (runs of one kind): the file stays small."""
    from planner.views import html

    job, lay = load_config(EXAMPLE_70B)
    pic = schedule_picture(job, lay.with_(vpp=5))
    old = html.MAX_BLOCKS
    try:
        html.MAX_BLOCKS = 10
        svg = html.svg_schedule(pic)
    finally:
        html.MAX_BLOCKS = old
    assert 'data-kind="F"' in svg and len(svg) < 200_000


def test_plan_html_has_the_table_scatter_and_each_plans_pictures(tmp_path):
    out = tmp_path / "plan.html"
    r = _invoke("plan", "--model", "70b", "--gpus", "512", "--top", "3", "--html", str(out))
    assert r.exit_code == 0, r.output
    text = out.read_text(encoding="utf-8")
    _self_contained(text)
    assert text.count('class="top"') + text.count('class="pick"') >= 3
    assert 'class="pick"' in text  # the seven-step pick is marked
    assert text.count("<details") == 3 and text.count("<details open") == 1
    assert "Seven-step procedure" in text


def test_plan_html_when_nothing_fits_lists_the_checked_suggestions(tmp_path):
    out = tmp_path / "none.html"
    r = _invoke("plan", "--model", "70b", "--gpus", "100", "--html", str(out))
    assert r.exit_code == 1
    text = out.read_text(encoding="utf-8")
    _self_contained(text)
    assert "No layout fits" in text and "--gpus 96" in text


def test_compare_html_highlights_differences(tmp_path):
    other = tmp_path / "pp8.yaml"
    other.write_text(EXAMPLE_70B.read_text().replace("pp: 4", "pp: 8").replace("dp: 64", "dp: 32"))
    out = tmp_path / "cmp.html"
    r = _invoke("compare", str(EXAMPLE_70B), str(other), "--html", str(out))
    assert r.exit_code == 0, r.output
    text = out.read_text(encoding="utf-8")
    _self_contained(text)
    assert re.search(r'<tr class="diff"><td>pp</td>', text)
    assert not re.search(r'<tr class="diff"><td>tp</td>', text)


def test_html_to_a_missing_folder_is_one_error_line(tmp_path):
    r = _invoke("validate", str(EXAMPLE_70B), "--html", str(tmp_path / "no" / "r.html"))
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --html") and "Traceback" not in r.output


@pytest.mark.parametrize(
    "example",
    ["mixtral-8x7b-64xh100.yaml", "deepseek-v3-1024xb200.yaml", "llama3-8b-128k-64xh100.yaml"],
)
def test_every_example_renders(tmp_path, example):
    out = tmp_path / "r.html"
    r = _invoke("validate", str(EXAMPLES / example), "--html", str(out))
    assert r.exit_code == 0, r.output
    _self_contained(out.read_text(encoding="utf-8"))


def test_a_small_dualpipe_schedule_is_drawn_block_by_block_with_its_weight_gradients():
    # the 70B example on pp 4 with DualPipe: m = 16 micro-batches (8 from each end), each
    # passing each rank once forward and once backward; DualPipe.step's zero-bubble
    # backwards leave W blocks: (h - k - 1) in step 3, (h - k - 1) in step 7 and k + 1 in
    # step 8, 2h - k - 1 on a rank (h = pp/2, k its distance from the nearer end): 3 on ranks
    # 0 and 3, 2 on ranks 1 and 2 (dualpipe_order)
    from planner.views.html import svg_schedule

    job, lay = load_config(EXAMPLE_70B)
    lay = lay.with_(pipeline_schedule="dualpipe")
    assert (lay.pp, lay.num_microbatches(job.training.global_batch_size)) == (4, 16)
    pic = schedule_picture(job, lay)
    assert pic.drawn_dualpipe
    svg = svg_schedule(pic)
    assert svg.count('data-kind="F"') == 4 * 16 and svg.count('data-kind="B"') == 4 * 16
    assert svg.count('data-kind="W"') == 3 + 2 + 2 + 3
    assert "weight gradient mb" in svg and "weight gradient left for later" in svg
