"""The report at scale (docs/benchmarks.md, "The report at scale"): a 4,800-pair page opens in
headless Chromium within its budget, and `harness-report` draws no card picture it drew before.

Budget: the 24,000-pair page loads in <= 1 s (navigation start to the load event's end; the page's
script runs inline, so its first page of rows is drawn by then) on a quiet 2-core machine. Here a
page of a fifth of that (20 SummEval documents x 16 candidates, the rows drawn 50 at a time either
way; written without the judge's chat view, which leaves the prompts out and the rows as they are) gets BOUND_S, generous for a shared, loaded test host; the negative control shows the
measure counts the page's own script (a page that spins past the bound is over it).
"""

from __future__ import annotations

import json
import os

import pytest

from harness.bench.browser import Chromium, find_chromium
from harness.bench.page import synthetic_run
from harness.metrics.card import find_judgments, render_cards
from harness.metrics.settings import MetricsSettings
from harness.report.page import write_report

BOUND_S = 3.0
"""A 4,800-pair page's load on a shared 2-core host (measured 0.2-0.4 s at load 10-17)."""

needs_chromium = pytest.mark.skipif(
    find_chromium() is None,
    reason="chromium is not installed (Debian: apt-get install -y chromium; .ci/run installs it)",
)


@needs_chromium
def test_a_4800_pair_page_loads_within_its_budget(tmp_path, shared_data):
    docs = synthetic_run(tmp_path, "summeval", "coherence", 20, 16, 0, shared_data)
    page = write_report(
        tmp_path, docs
    )  # no chat view: the prompts are not checked pair by pair (minutes here)
    with Chromium() as browser:
        loads = [browser.load(page) for _ in range(2)]
        status = browser.evaluate("document.getElementById('pairs-status').textContent")
        drawn = browser.evaluate("document.querySelectorAll('#pairs-body tr.pair').length")
    best = min(got.load_ms for got in loads) / 1000
    assert all(not got.errors and not got.requests for got in loads)
    assert status == "2400 of 2400 pairs; page 1 of 48" and drawn == 50
    assert best < BOUND_S, (
        f"{page.stat().st_size / 1e6:.2f} MB page loaded in {best:.2f} s (load {os.getloadavg()[0]:.1f})"
    )


@needs_chromium
def test_the_load_time_counts_the_pages_own_script(tmp_path):
    """Negative control: a page whose inline script spins for BOUND_S + 0.2 s is measured over the bound."""
    page = tmp_path / "slow.html"
    spin = int((BOUND_S + 0.2) * 1000)
    page.write_text(
        f"<!doctype html><p>x</p><script>var t = performance.now(); while (performance.now() - t < {spin}) {{}}</script>"
    )
    with Chromium() as browser:
        assert browser.load(page).load_ms / 1000 > BOUND_S


def test_report_draws_no_card_picture_it_drew_before(tmp_path, shared_data):
    """A second render_cards (what harness-report does to each job of a finished sweep) keeps every
    picture (same bytes, same mtime); a changed judgment draws them again with a new key."""
    synthetic_run(tmp_path, "summeval", "coherence", 2, 3, 0, shared_data)
    settings = MetricsSettings(bootstrap=0)
    first = render_cards(tmp_path, echo=lambda _: None, metrics=settings)[0].pictures
    stamps = {k: (p.stat().st_mtime_ns, p.read_bytes()) for k, p in first.items()}
    assert set(first) == {"reliability", "p_a_by_order", "answer_mass"}
    again = render_cards(tmp_path, echo=lambda _: None, metrics=settings)[0].pictures
    assert {k: (p.stat().st_mtime_ns, p.read_bytes()) for k, p in again.items()} == stamps
    # Negative control: one P(A) changed redraws (the PNG's Key chunk no longer matches).
    path = find_judgments(tmp_path)[0]
    lines = path.read_text().splitlines()
    row = json.loads(lines[0])
    row["p_a"] = 0.123456
    path.write_text("\n".join([json.dumps(row), *lines[1:]]) + "\n")
    redrawn = render_cards(tmp_path, echo=lambda _: None, metrics=settings)[0].pictures
    assert all(redrawn[k].stat().st_mtime_ns != stamps[k][0] for k in ("p_a_by_order", "reliability"))
    assert redrawn["answer_mass"].stat().st_mtime_ns == stamps["answer_mass"][0]  # its masses did not change


@pytest.mark.slow  # three harness commands, each its own process
def test_harness_bench_sweep_times_collect_and_report_over_copies_of_one_run(tmp_path, shared_data):
    """`harness-bench sweep --jobs 4` over a synthetic run: a multirun folder whose multirun.yaml
    lists 4 jobs with distinct overrides, each job's page and the index written, three steps timed;
    a --job without results.json is one line, exit non-zero."""
    from helpers.cli import bench_json, run_bench

    from harness.runtime.sweep import listed_jobs

    job = tmp_path / "job"
    job.mkdir()
    synthetic_run(job, "summeval", "coherence", 2, 3, 0, shared_data)
    got = bench_json(
        run_bench(["sweep", "--job", str(job), "--jobs", "4", "--out", str(tmp_path / "o")], tmp_path)
    )
    assert got["jobs"] == 4 and got["pages"] == 4 and got["index"] is True and got["judgments_per_job"] == 12
    assert [s["step"] for s in got["steps"]] == [
        "harness-collect table",
        "harness-report",
        "harness-report again",
    ]
    assert all(s["cpu_s"] > 0 for s in got["steps"])
    jobs = listed_jobs(tmp_path / "o" / "sweep")
    assert len({tuple(o) for _, o, _ in jobs}) == 4 and all(d is not None and d.is_dir() for _, _, d in jobs)
    bad = run_bench(["sweep", "--job", str(tmp_path / "nothing")], tmp_path)
    assert bad.returncode != 0 and "holds no results.json" in bad.stderr and "Traceback" not in bad.stderr
