"""Multiruns as users type them, through Hydra's basic launcher (in this process; test_slurm.py runs
the same on the localhost SLURM cluster):
- a failing job is one line naming it, the other jobs still run, the sweep ends with one line
  naming every failed job and exit 2; collect then marks its table partial and exits 1;
- a sweep over document shards merges itself when it ends (harness.runtime.sweep_end) into
  <sweep dir>/merged/, equal to the unsharded run: judgments, every metric, the report card and
  the W&B run; a failed shard is named, nothing is merged, and rerunning the same command judges
  only that shard (each job's own request cache, cache.per_job);
- experiments whose shards cannot be merged refuse task.num_shards.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from helpers.cli import run_in_process
from helpers.results import page_data, results_only
from helpers.wandb_offline import run_record
from omegaconf import OmegaConf

from harness.runtime.attempts import read_attempts
from harness.runtime.sweep import job_cache_path, sweep_jobs

REPO = Path(__file__).resolve().parents[2]
SHARDED = [
    "experiment=judge",
    "model=tiny_llama",
    "task.docs=3",
    "task.max_candidates=3",
    "experiment.shuffles=5",
    "backend.batch_size=1",
    "progress=false",
]
"""A tiny judge run; backend.batch_size=1 so a prompt's score cannot depend on its batch, which
differs by shard: sharded equals unsharded bit for bit."""


def _rows(path: Path, n: int = 3) -> list[dict]:
    rows = [
        {
            "doc_id": f"d{d}",
            "source": f"source text {d}",
            "candidate_id": f"c{c}",
            "text": f"summary {d}{c}",
            "scores": {"q": float(c + d)},
        }
        for d in range(2)
        for c in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def _error_lines(r: subprocess.CompletedProcess) -> list[str]:
    return [line for line in (r.stdout + r.stderr).splitlines() if line.startswith("error:")]


def test_a_failing_job_is_named_the_others_run_and_collect_marks_the_table_partial(tmp_path):
    ok, ok2, bad = tmp_path / "ok.jsonl", tmp_path / "ok2.jsonl", tmp_path / "bad.jsonl"
    _rows(ok), _rows(ok2)
    bad.write_text(ok.read_text().splitlines()[0] + "\n{not json\n")
    sweep = tmp_path / "sweep"
    r = run_in_process(
        [
            "-m",
            "experiment=judge",
            "model=tiny_llama",
            "task=jsonl",
            f"task.path={ok},{bad},{ok2}",
            "experiment.shuffles=5",
            "wandb.mode=disabled",
            "progress=false",
            f"hydra.sweep.dir={sweep}",
        ],
        tmp_path,
    )
    assert r.returncode == 2, (r.stdout + r.stderr)[-3000:]
    assert "Traceback" not in r.stdout + r.stderr
    job_line, summary = _error_lines(r)  # the job's line as it failed, the sweep's last line
    assert job_line.startswith(f"error: job 1 (task.path={bad}): {bad}, line 2: not valid JSON")
    assert summary.startswith(f"error: 1 of 3 jobs failed: job 1 (task.path={bad}): {bad}, line 2")
    assert (r.stdout + r.stderr).rstrip().endswith(summary)
    for job in ("0", "2"):  # the job after the failed one ran too
        assert (sweep / job / "results.json").is_file()
    assert [a["status"] for a in read_attempts(sweep / "1")] == ["failed"]

    from harness.runtime.collect import main

    out = tmp_path / "collected"
    assert main(["table", str(sweep), "--out", str(out), "--no-figures"]) == 1  # partial: not 0
    table = (out / "table.md").read_text()
    assert len([line for line in table.splitlines() if line.startswith(f"| {tmp_path}")]) == 2
    assert (
        f"PARTIAL: 1 job(s) of the sweep have no row: job 1 (task.path={bad}): failed (its attempts.jsonl)"
        in table
    )
    # harness-report's index.html: the same table, cell for cell, and the same PARTIAL caption; each
    # job's state from its own run directory; no shared setting the failed job did not have.
    from harness.runtime.report_cli import main as report

    assert report([str(sweep)]) == 0
    index, lines = index_page(sweep), table.splitlines()
    assert index["collect"] == [line[2:-2].split(" | ") for line in lines[:1] + lines[2:4]]
    assert index["caption"] == lines[-1] and lines[-1].startswith("PARTIAL: 1 job(s)")
    assert f"partial table: 1 job(s) listed in {sweep / 'multirun.yaml'} have no row: job 1" in index["text"]
    assert [row[:3] for row in index["jobs"][1:]] == [
        [str(k), f"task.path={path}", state]
        for k, path, state in (
            (0, ok, "finished"),
            (1, bad, "failed (its attempts.jsonl)"),
            (2, ok2, "finished"),
        )
    ]
    assert "3 jobs, 2 finished; shared settings:" in index["text"] and "task.path=" not in index["shared"]
    # The sweep of jobs 0 and 1 alone: task.path=ok is no shared setting, the failed job had bad.
    two = tmp_path / "two"
    shutil.copytree(sweep, two, ignore=shutil.ignore_patterns("2"))
    spec = OmegaConf.load(two / "multirun.yaml")
    spec.hydra.overrides.task = [
        f"task.path={ok},{bad}" if o.startswith("task.path=") else o for o in spec.hydra.overrides.task
    ]
    OmegaConf.save(spec, two / "multirun.yaml")
    assert report([str(two)]) == 0
    assert "2 jobs, 1 finished" in index_page(two)["text"] and "task.path" not in index_page(two)["shared"]
    # Control: the two complete jobs alone (no multirun.yaml to hold them against) are a whole table.
    (sweep / "multirun.yaml").unlink()
    assert main(["table", str(sweep), "--out", str(out), "--no-figures"]) == 0
    assert "PARTIAL" not in (out / "table.md").read_text()


def index_page(root: Path) -> dict:
    """A sweep's index.html read back: its text, the shared-settings line, the job table's and the
    collect table's rows (header first) as cell texts, and the collect table's caption."""
    page = (root / "index.html").read_text()
    text = lambda h: html.unescape(re.sub("<[^>]+>", "", h))  # noqa: E731
    got = {"text": text(page), "shared": text(page.split("shared settings:", 1)[1].split("</p>", 1)[0])}
    for part in ("jobs", "collect"):
        block = page.split(f"<div id='{part}'>", 1)[1].split("</div>", 1)[0]
        got[part] = [
            [text(c) for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", tr)]
            for tr in re.findall("<tr>(.*?)</tr>", block)
        ]
        got["caption"] = (
            text(block.split("<p class='note'>", 1)[1].split("</p>", 1)[0]) if "class='note'" in block else ""
        )
    return got


def _wandb(run_dir: Path) -> dict:
    """The offline W&B run of a run directory, read back with W&B's own reader: its config, its
    summary's numbers (not W&B's own `_` keys), its history and its artifacts' file names."""
    from helpers.wandb_offline import wandb_records

    config, summary, history, files = {}, {}, [], []
    for rec in wandb_records(run_dir):
        kind = rec.get("type")
        if kind == "run":
            config.update({k: v for k, v in rec["run"]["config"]["update"].items() if not k.startswith("_")})
            config.update({f"run.{k}": rec["run"].get(k) for k in ("display_name", "job_type")})
        elif kind == "config":
            config.update({k: v for k, v in rec["config"]["update"].items() if not k.startswith("_")})
        elif kind == "summary":
            summary.update(
                {
                    k: v
                    for k, v in rec["summary"]["update"].items()
                    if not k.startswith("_") and not isinstance(v, str) and "artifact" not in k
                }
            )
        elif kind == "history":
            history.append(
                {
                    k: v
                    for k, v in rec["history"]["item"].items()
                    if not k.startswith("_") and isinstance(v, int | float)
                }
            )
        elif kind == "artifact" and rec["artifact"]["type"] == "run-outputs":
            files = sorted(e["path"] for e in rec["artifact"]["manifest"]["contents"])
    return {"config": config, "summary": summary, "history": history, "files": files}


@pytest.fixture(scope="module")
def shard_sweep(tmp_path_factory) -> Path:
    """SHARDED as 3 document shards: one sweep with the basic launcher (W&B offline), merged when it
    ends into <sweep>/merged. Its data dir is <sweep>/../data."""
    tmp = tmp_path_factory.mktemp("shards")
    sweep = tmp / "sweep"
    r = run_in_process(
        ["-m", *SHARDED, "task.num_shards=3", "task.shard_index=range(3)", f"hydra.sweep.dir={sweep}"],
        tmp / "sharded",
        env={"HARNESS_DATA_DIR": str(tmp / "data")},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert (
        f"merged shards 0..2 (jobs 0,1,2): 3 documents, 18 judgments -> {sweep / 'merged'}"
        in r.stdout + r.stderr
    )
    return sweep


@pytest.mark.slow
def test_shard_sweep_merges_at_its_end_into_the_unsharded_run(shard_sweep, tmp_path):
    sweep, merged, full = shard_sweep, shard_sweep / "merged", tmp_path / "full"
    data = {"HARNESS_DATA_DIR": str(sweep.parent / "data")}  # the sweep's data dir; a request cache each
    r = run_in_process([*SHARDED, f"hydra.run.dir={full}"], tmp_path / "one", env=data)
    assert r.returncode == 0, r.stderr[-3000:]
    for i in range(3):
        assert json.loads((sweep / str(i) / "results.json").read_text())["n_docs"] == 1
    assert (merged / "judgments.jsonl").read_bytes() == (full / "judgments.jsonl").read_bytes()
    results, want = (json.loads((d / "results.json").read_text()) for d in (merged, full))
    assert results_only(results) == results_only(want) and results["metrics"] == want["metrics"]
    assert (merged / "card.md").read_text() == (full / "card.md").read_text()
    for picture in ("card_reliability.png", "card_p_a_by_order.png", "card_answer_mass.png"):
        assert (merged / picture).read_bytes() == (full / picture).read_bytes(), picture
    # The page: every pair and every prompt as the unsharded run's page shows them.
    got_page, want_page = page_data(merged / "report.html"), page_data(full / "report.html")
    assert got_page["sets"] == want_page["sets"] and want_page["sets"][0]["prompt"]["skeletons"]
    # The unsharded command's overrides (as Hydra's sweeper spells them: `progress=False`).
    keys = [
        [o.partition("=")[0] for o in json.loads((d / "overrides.json").read_text())] for d in (merged, full)
    ]
    assert keys[0] == keys[1]
    assert (
        json.loads((merged / "config.json").read_text())["task"]
        == json.loads((full / "config.json").read_text())["task"]
    )
    # The W&B run: the same config (but where the caches are, and its name: `-merged`), summary,
    # history and files.
    got, ref = _wandb(merged), _wandb(full)
    for side in (got, ref):
        side["config"].pop("cache")
    assert got["config"].pop("run.display_name") == ref["config"].pop("run.display_name") + "-merged"
    assert got["config"] == ref["config"] and got["config"]["judge_identity"] == results["judge"]
    assert got["summary"] == ref["summary"] and got["summary"]["none/n_docs"] == 3
    assert got["history"] == ref["history"]
    assert set(ref["files"]) - {"attempts.jsonl"} <= set(got["files"]) and "merge.json" in got["files"]

    from harness.runtime.collect import main

    assert main(["table", str(sweep), "--no-figures"]) == 0  # the merged run is the table's one row
    table = (sweep / "collect" / "table.md").read_text()
    assert table.splitlines()[2].startswith("| merged |") and len(table.splitlines()) == 5


def test_the_merged_run_shows_its_prompts_says_it_is_a_merge_and_joins_the_sweeps_group(
    shard_sweep, tmp_path
):
    """merged/report.html holds every pair's prompt as harness-report renders it from the run's
    config.json; its header says the model calls are the shards', not an attempt's; its W&B run is
    in the shards' group, named as theirs with `-merged`."""
    merged = shard_sweep / "merged"
    shown = page_data(merged / "report.html")
    (prompt,) = [s["prompt"] for s in shown["sets"]]
    assert prompt["skeletons"] and prompt["note"].startswith("the model's chat template")
    from harness.runtime.report_cli import main as report

    assert report([str(merged), "--out", str(tmp_path / "again")]) == 0
    assert page_data(tmp_path / "again" / "report.html")["sets"] == shown["sets"]
    calls = sum(
        json.loads((shard_sweep / str(i) / "results.json").read_text())["judge_calls"] for i in range(3)
    )
    html = (merged / "report.html").read_text()
    assert "the model scored" not in html and "this run&#x27;s last attempt" not in html
    assert f"merged from 3 shards (merge.json); the shards&#x27; model calls together: {calls}" in html
    shard, whole = run_record(shard_sweep / "0"), run_record(merged)
    assert (
        shard["run_group"] == "/".join(shard_sweep.parts[-2:])
        and whole.get("run_group") == shard["run_group"]
    )
    assert whole["display_name"] == shard["display_name"] + "-merged"


def test_the_sweep_index_counts_merged_shards_as_finished_jobs(shard_sweep):
    """harness-report on the shard sweep: each shard is a finished job (its own run directory says
    so, though collect's table keeps only the merged run), and the merged run has a row of its own."""
    from harness.runtime.report_cli import main as report

    assert report([str(shard_sweep)]) == 0
    index = index_page(shard_sweep)
    assert "3 jobs, 3 finished, 1 merged run of their shards; shared settings:" in index["text"]
    assert [row[:3] for row in index["jobs"][1:]] == [
        *([str(i), f"task.num_shards=3, task.shard_index={i}", "finished"] for i in range(3)),
        ["merged", "–", "merged run"],
    ]
    assert [row[0] for row in index["collect"]] == ["run", "merged"]


def test_a_merge_by_hand_writes_what_the_sweeps_merge_writes(shard_sweep, tmp_path):
    """`python -m harness.runtime.collect merge DIRS --out DIR` (slurm/node.sbatch's last line):
    config.json, overrides.json, the card, report.html and the W&B run beside judgments and results,
    as the sweep's own merge wrote them; harness-report then refreshes it."""
    from harness.runtime.collect import main
    from harness.runtime.report_cli import main as report

    out, merged = tmp_path / "by-hand", shard_sweep / "merged"
    assert main(["merge", *(str(shard_sweep / str(i)) for i in (2, 0, 1)), "--out", str(out)]) == 0
    names = lambda d: sorted(p.name for p in d.iterdir())  # noqa: E731
    assert names(out) == names(merged)
    for name in ("judgments.jsonl", "results.json", "config.json", "overrides.json", "card.md"):
        assert (out / name).read_text() == (merged / name).read_text(), name
    assert page_data(out / "report.html")["sets"] == page_data(merged / "report.html")["sets"]
    got = run_record(out)
    assert got.get("run_group") == run_record(merged)["run_group"] and got["display_name"].endswith("-merged")
    assert report([str(out)]) == 0


@pytest.mark.slow
def test_failed_shard_is_named_nothing_merged_and_a_rerun_judges_only_it(tmp_path):
    """cache.per_job=true (the slurm launcher's default) here, so each shard has its own cache file.
    Shard 1's file is blocked by a folder: the job fails in one line, the sweep names it, no merged
    run is written. With the folder gone, the same command judges only shard 1."""
    sweep = tmp_path / "sweep"
    args = [
        "-m",
        *SHARDED,
        "task.num_shards=3",
        "task.shard_index=range(3)",
        "cache.per_job=true",
        "wandb.mode=disabled",
        f"hydra.sweep.dir={sweep}",
    ]
    # Job 1's overrides as Hydra's basic sweeper expands the command line, hence its cache file.
    task_overrides = [a for a in args[1:] if not a.startswith("hydra.")]
    job1 = sweep_jobs(OmegaConf.create({"hydra": {"overrides": {"task": task_overrides}}}))[1]
    blocker = job_cache_path(tmp_path / "cache" / "requests.sqlite", "judge", job1)
    blocker.mkdir(parents=True)
    r = run_in_process(args, tmp_path)
    assert r.returncode == 2, (r.stdout + r.stderr)[-3000:]
    summary = _error_lines(r)[-1]
    assert summary.startswith(
        f"error: 1 of 3 jobs failed: job 1 (task.shard_index=1): {blocker}: is a folder"
    ), summary
    assert not (sweep / "merged").exists()
    blocker.rmdir()
    r = run_in_process(args, tmp_path)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    calls = {i: [a["calls"] for a in read_attempts(sweep / str(i))] for i in range(3)}
    # 6 ordered pairs and the content-free prompt per shard; the rerun asks the model for shard 1's only.
    assert calls == {0: [7, 0], 1: [0, 7], 2: [7, 0]}, calls
    files = sorted((tmp_path / "cache" / "sweeps" / "judge").glob("*/requests.sqlite"))
    assert [f.parent.name.split("-")[1] for f in files] == ["0", "1", "2"]  # one file per shard
    # Folded into cache.path when the sweep ended: the 18 pairs and the content-free prompt once.
    with sqlite3.connect(tmp_path / "cache" / "requests.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM scores").fetchone()[0] == 19
    assert json.loads((sweep / "merged" / "results.json").read_text())["n_judgments"] == 18


def test_experiments_whose_shards_cannot_merge_refuse_num_shards(tmp_path):
    """Refused with the config checks, before any file is written: no run folder is left behind."""
    for experiment, extra in (("zepo", []), ("abb", ["task=arena_bench", "task.shard_index=1"])):
        run_dir = tmp_path / experiment
        r = run_in_process(
            [
                f"experiment={experiment}",
                "model=tiny_llama",
                *extra,
                "task.num_shards=2",
                "wandb.mode=disabled",
                f"hydra.run.dir={run_dir}",
            ],
            tmp_path,
        )
        assert r.returncode == 2 and _error_lines(r) == [
            "error: task.num_shards=2: only experiment=judge is split into document shards and merged back; run "
            f"experiment={experiment} whole (task.num_shards=1) - docs/slurm.md says why"
        ], (r.stdout + r.stderr)[-2000:]
        assert not run_dir.exists(), sorted(p.name for p in run_dir.iterdir())
    # Before any job: the multirun is refused as a whole (the sweep-end callback's start).
    r = run_in_process(
        [
            "-m",
            "experiment=abb",
            "model=tiny_llama",
            "task=arena_bench",
            "task.num_shards=2",
            "task.shard_index=0,1",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
        ],
        tmp_path,
    )
    assert r.returncode == 2 and _error_lines(r)[-1].startswith(
        "error: refused before any job: task.num_shards=2: only"
    )
    assert not (tmp_path / "sweep" / "0").exists()


def test_override_key_reads_every_spelling_of_a_key():
    """The one parse every sweep helper uses (job names, shard groups, cache files, launcher requests)."""
    from harness.runtime.sweep import override_key, varying

    assert [override_key(o) for o in ("task.docs=3", "+task.x=1", "++task.x=a=b", "~task.y", "seed")] == [
        "task.docs",
        "task.x",
        "task.x",
        "task.y",
        "seed",
    ]
    assert varying([["+seed=0", "task.docs=3"], ["++seed=1", "task.docs=3"]]) == {"seed"}
