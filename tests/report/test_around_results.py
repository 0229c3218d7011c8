"""The tools around the results (harness-report, harness-collect table/merge, harness-paper-tables,
harness-bench) get the judge's protections: every --out is checked before any work (a file, a
read-only place, another run: one line, nothing replaced), a shard that lost pairs is not merged,
bookkeeping files are read as input files are (one located line), nothing on a page or in a CSV
runs as a script or a formula. Each test fails on d2cc091's behaviour (named in its docstring).

The runs are real tiny-Llama judge runs (one of 2 documents, two shards of it); the tools are
called through their console entry points' `main` in this process."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import pytest
from helpers.fs import read_only

from harness.runtime import collect, report_cli


def _err(capsys) -> str:
    """The one `error:` line of stderr (asserts there is exactly one)."""
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_llama):
    """Real tiny judge runs on a JSONL file (2 documents of 4 candidates, 3 judged): `whole` and
    its two shards."""
    from helpers.cli import run_in_process

    tmp = tmp_path_factory.mktemp("runs")
    rows = [
        {
            "doc_id": f"d{d}",
            "source": f"source text {d}",
            "candidate_id": f"c{c}",
            "text": f"summary {d} {c}",
            "scores": {"quality": float(c + d)},
        }
        for d in range(2)
        for c in range(4)
    ]
    (tmp / "mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = [
        "experiment=judge",
        "model=tiny_llama",
        "task=jsonl",
        f"task.path={tmp / 'mine.jsonl'}",
        "task.max_candidates=3",
        "experiment.shuffles=2",
        "metrics.bootstrap=0",
        "wandb.mode=disabled",
        "progress=false",
    ]
    todo = {"whole": [f"hydra.run.dir={tmp / 'whole'}"]}
    todo |= {
        f"shard{k}": ["task.num_shards=2", f"task.shard_index={k}", f"hydra.run.dir={tmp / f'shard{k}'}"]
        for k in (0, 1)
    }
    for extra in todo.values():
        r = run_in_process([*args, *extra], tmp)
        assert r.returncode == 0, r.stderr[-3000:]
    return tmp


def _copy(runs: Path, name: str, dest: Path) -> Path:
    return Path(shutil.copytree(runs / name, dest / name))


# -- --out -------------------------------------------------------------------------------------
def test_report_out_onto_another_run_is_refused_and_replaces_nothing(runs, tmp_path, capsys):
    """`harness-report A --out B` overwrote B's results.json, config.json, overrides.json and
    judgments.jsonl. Now one line, B untouched; control: --out a new folder, and again onto that
    copy (its own earlier output), both write."""
    a, b = _copy(runs, "whole", tmp_path), _copy(runs, "shard0", tmp_path)
    before = {p.name: p.read_bytes() for p in b.iterdir() if p.is_file()}
    assert report_cli.main([str(a), "--out", str(b)]) == 2
    line = _err(capsys)
    assert f"--out {b} holds another run (results.json, config.json, judgments.jsonl)" in line
    assert {p.name: p.read_bytes() for p in b.iterdir() if p.is_file()} == before
    for _ in range(2):
        assert report_cli.main([str(a), "--out", str(tmp_path / "cards")]) == 0
    assert (tmp_path / "cards" / "report.html").is_file()


def test_report_out_onto_its_own_run_reports_in_place(runs, tmp_path, capsys):
    """`harness-report RUN --out RUN` rewrote card.md, then printed "cannot write into ... (None)"
    (shutil copying a file onto itself), exit 2. Now it is the in-place report, exit 0."""
    a = _copy(runs, "whole", tmp_path)
    assert report_cli.main([str(a), "--out", str(a / ".." / a.name)]) == 0
    assert "error" not in capsys.readouterr().err
    assert (a / "report.html").is_file()


def test_merge_out_onto_another_run_is_refused(runs, tmp_path, capsys):
    """`harness-collect merge S0 S1 --out B` replaced B's run files. Now one line, B untouched;
    control: the merge into a new folder, then again into its own output, both write."""
    b = _copy(runs, "whole", tmp_path)
    before = (b / "results.json").read_bytes()
    shards = [str(runs / "shard0"), str(runs / "shard1")]
    assert collect.main(["merge", *shards, "--out", str(b)]) == 2
    assert f"--out {b} holds another run" in _err(capsys)
    assert (b / "results.json").read_bytes() == before
    for _ in range(2):
        assert collect.main(["merge", *shards, "--out", str(tmp_path / "merged")]) == 0
    assert json.loads((tmp_path / "merged" / "results.json").read_text())["n_docs"] == 2


@pytest.mark.parametrize("how", ["file", "read-only"])
def test_every_out_that_cannot_be_written_is_one_line_before_any_work(runs, tmp_path, capsys, how):
    """A file or a read-only folder as the output location was a traceback after the work in
    harness-collect table and merge, harness-paper-tables, harness-bench page and gpu (gpu --dry-run
    only after its checks had run). Now one line naming the flag, before any work."""
    from harness.bench import cli as bench_cli
    from harness.report import paper_tables

    if how == "file":
        target = tmp_path / "taken"
        target.write_text("not a folder")
        want = "is a file, not a folder"
    else:
        want = "cannot be written"
        target = tmp_path / "locked"
        target.mkdir()
    shards = [str(runs / "shard0"), str(runs / "shard1")]
    calls = {
        "table": lambda t: collect.main(["table", str(runs / "whole"), "--out", str(t), "--no-figures"]),
        "merge": lambda t: collect.main(["merge", *shards, "--out", str(t)]),
        "paper": lambda t: paper_tables.main([str(runs), "--table", "1", "--out", str(t / "t1")]),
        "page": lambda t: bench_cli.main(["page", "--out", str(t)]),
        "gpu": lambda t: bench_cli.main(["gpu", "--dry-run", "--json", str(t / "gpu.json")]),
    }
    with read_only(target) if how == "read-only" else contextlib.nullcontext():
        for name, call in calls.items():
            assert call(target) == 2, name
            line = _err(capsys)
            assert (want if how == "file" else "cannot be written") in line, (name, line)
            assert str(target) in line, (name, line)


# -- merge -------------------------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["lost", "other"])
def test_a_shard_that_lost_pairs_is_not_merged(runs, tmp_path, capsys, damage):
    """A shard whose judgments.jsonl lost pairs merged without a word (every metric recomputed on the
    shorter list). Now each shard's judgments are checked against its results.json: the count
    (`lost`: a pair deleted) and every ordered pair of its documents (`other`: one pair
    replaced by a pair the run never asked, the count unchanged). Control: the untouched shards merge (the --out test)."""
    shards = [_copy(runs, f"shard{k}", tmp_path) for k in (0, 1)]
    path = shards[1] / "judgments.jsonl"
    lines = path.read_text().splitlines()
    if damage == "lost":
        del lines[2]
        want = "holds 5 judgments, its results.json counted 6: the shard lost pairs; rerun shard 1"
    else:
        row = json.loads(lines[2])
        lines[2] = json.dumps({**row, "b_id": "c3"})  # a candidate past task.max_candidates=3
        want = "has 6 judgments for 6 ordered pairs of its 3 candidates (missing"
    path.write_text("\n".join(lines) + "\n")
    assert collect.main(["merge", *map(str, shards), "--out", str(tmp_path / "merged")]) == 2
    line = _err(capsys)
    assert str(path) in line and want in line, line
    assert not (tmp_path / "merged" / "results.json").exists()


# -- what the report reads ---------------------------------------------------------------------
def test_the_report_says_when_the_data_changed_since_the_run(runs, tmp_path, capsys):
    """A data file edited after the run: harness-report showed the new texts and prompts beside the
    old P(A), no warning. results.json now holds each document's fingerprint (`documents_sha256`);
    the report compares, says so in one warning line and on the page, and shows no texts. Control:
    the unedited data gives no warning and the texts."""
    run = _copy(runs, "whole", tmp_path)
    data = Path(shutil.copy(runs / "mine.jsonl", tmp_path / "mine.jsonl"))
    config = json.loads((run / "config.json").read_text())
    config["task"]["path"] = str(data)  # the run as if made on this copy of the data
    (run / "config.json").write_text(json.dumps(config))
    assert report_cli.main([str(run)]) == 0
    assert "warning" not in capsys.readouterr().err
    assert "summary 1 2" in (run / "report.html").read_text()
    data.write_text(data.read_text().replace("summary 1 2", "an edited summary"))
    assert report_cli.main([str(run)]) == 0
    warnings = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning: ")]
    assert len(warnings) == 1 and "the task's data changed since the run: 1 of its 2 documents" in warnings[0]
    page = (run / "report.html").read_text()
    assert "the task&#x27;s data changed since the run" in page or "the task's data changed" in page
    assert "an edited summary" not in page and "summary 1 2" not in page


@pytest.mark.parametrize("content", ["[]", "null", '{"metrics": {"none": {"spearman": Infinity}}}'])
def test_a_results_json_that_is_not_a_runs_record_is_one_line(runs, tmp_path, capsys, content):
    """harness-report on a results.json of `[]` or `null` was a traceback (card.py; on a sweep no
    index.html); one holding Infinity or NaN was shown ("spearman inf") by the report and the
    collected table. Now one line naming the file (and the field), in both tools."""
    run = _copy(runs, "whole", tmp_path)
    (run / "results.json").write_text(content)
    assert report_cli.main([str(run)]) == 2
    line = _err(capsys)
    assert str(run / "results.json") in line
    if content.startswith("{"):
        assert "field 'metrics.none.spearman'" in line and "holds inf" in line
        assert collect.main(["table", str(run), "--out", str(tmp_path / "t"), "--no-figures"]) == 2
        assert "field 'metrics.none.spearman'" in _err(capsys)
    else:
        assert "not a JSON object" in line


# -- nothing on a page or in a CSV runs --------------------------------------------------------
def test_a_job_folder_named_like_a_scheme_is_a_relative_link_on_the_sweep_index(runs, tmp_path):
    """A job folder named `javascript:...` (e.g. from hydra.sweep.subdir) became a live link on the
    sweep's index.html: clicking it ran the script. Now every link is a relative path, each segment
    URL-encoded: in Chromium every link resolves to a file: URL inside the sweep folder."""
    from harness.bench.browser import Chromium, find_chromium

    if find_chromium() is None:
        pytest.skip("no Chromium (Debian: apt-get install chromium)")
    sweep = tmp_path / "sweep"
    for name in ("0", "javascript:document.title='owned'", "a b#c?d"):
        shutil.copytree(runs / "whole", sweep / name)
    assert report_cli.main([str(sweep)]) == 0
    with Chromium() as browser:
        got = browser.load(sweep / "index.html")
        links = browser.evaluate("Array.from(document.querySelectorAll('a')).map(a => a.href)")
    assert got.errors == [] and got.requests == []
    assert len(links) == 3 * 4  # report, results.json, card.md and run.log of each job
    base = (sweep.resolve().as_uri()) + "/"
    assert all(link.startswith(base) for link in links), links
    assert base + "javascript%3Adocument.title%3D%27owned%27/report.html" in links
    assert base + "a%20b%23c%3Fd/report.html" in links


def test_csv_cells_that_start_like_a_formula_are_text(tmp_path):
    """harness-collect's table.csv and the paper tables' CSV wrote cells such as `+1+cmd|calc` and
    `@SUM(1+1)` unchanged: a spreadsheet runs them. Now such a cell (header included) starts with
    `'` (OWASP's advice); numbers (`-0.25`) and plain text are unchanged."""
    import csv

    from harness.report.paper_tables import write_csv

    root = tmp_path / "sweep"
    for k, value in enumerate(["+1+cmd|calc", "@SUM(1+1)", "-0.25", "plain"]):
        job = root / str(k)
        job.mkdir(parents=True)
        (job / "overrides.json").write_text(json.dumps([f"model={value}"]))
        (job / "results.json").write_text(json.dumps({"metrics": {"none": {"spearman": -0.5}}}))
    assert collect.main(["table", str(root), "--out", str(tmp_path / "t"), "--no-figures"]) == 0
    rows = list(csv.reader((tmp_path / "t" / "table.csv").open()))
    assert [r[0] for r in rows[1:]] == ["'+1+cmd|calc", "'@SUM(1+1)", "-0.25", "plain"]
    assert all(r[-1] == "-0.5" for r in rows[1:])
    write_csv(tmp_path / "p.csv", [{"=cmd": "-2", "task": '=HYPERLINK("x")', "v": None}])
    assert list(csv.reader((tmp_path / "p.csv").open())) == [
        ["'=cmd", "task", "v"],
        ["-2", '\'=HYPERLINK("x")', ""],
    ]


# -- sweeps: every job named, bookkeeping read as input ----------------------------------------
@pytest.fixture(scope="module")
def failed_sweep(tmp_path_factory, runs):
    """A real sweep of two jobs that both fail (their data file is missing)."""
    from helpers.cli import run_in_process

    tmp = tmp_path_factory.mktemp("failed")
    r = run_in_process(
        [
            "-m",
            "experiment=judge",
            "model=tiny_llama",
            "task=jsonl",
            f"task.path={tmp / 'gone1.jsonl'},{tmp / 'gone2.jsonl'}",
            f"hydra.sweep.dir={tmp / 'sweep'}",
            "wandb.mode=disabled",
        ],
        tmp,
    )
    assert r.returncode == 2, r.stderr[-2000:]
    return tmp / "sweep"


def test_a_sweep_whose_jobs_all_failed_lists_each_job_and_why(failed_sweep, tmp_path, capsys):
    """collect and report said only "no results.json below this directory: nothing finished yet?".
    Now one line lists every job of multirun.yaml with its state."""
    sweep = Path(shutil.copytree(failed_sweep, tmp_path / "sweep"))
    for call in (
        lambda: collect.main(["table", str(sweep), "--no-figures"]),
        lambda: report_cli.main([str(sweep)]),
    ):
        assert call() == 2
        line = _err(capsys)
        assert "no job of the sweep finished: job 0 (task.path=" in line, line
        assert "gone1.jsonl): failed (its attempts.jsonl)" in line or "gone1.jsonl): no results.json" in line
        assert "; job 1 (task.path=" in line


@pytest.mark.parametrize(
    "content, want",
    [
        (b"- just\n- a list\n", "holds no hydra.sweep mapping"),
        (b"hydra: {sweep: [unclosed\n", "not YAML"),
        (b"hydra:\n  sweep: {dir: x}\n  note: \xff\n", "not UTF-8"),
    ],
)
def test_a_damaged_multirun_yaml_is_one_line(failed_sweep, runs, tmp_path, capsys, content, want):
    """A damaged or list-shaped multirun.yaml was a traceback in collect and report (sweep.py) once a
    job had finished (d2cc091: omegaconf's ConfigTypeError, yaml's ParserError, a
    UnicodeDecodeError). Now it is read as input files are: one line naming it."""
    sweep = Path(shutil.copytree(failed_sweep, tmp_path / "sweep"))
    shutil.copytree(runs / "whole", sweep / "2")  # a finished job: the old code then read the file
    (sweep / "multirun.yaml").write_bytes(content)
    for call in (
        lambda: collect.main(["table", str(sweep), "--no-figures"]),
        lambda: report_cli.main([str(sweep)]),
    ):
        assert call() == 2
        line = _err(capsys)
        assert str(sweep / "multirun.yaml") in line and want in line, line


def test_a_job_whose_attempts_file_is_not_utf8_is_one_line(failed_sweep, runs, tmp_path, capsys):
    """A non-UTF-8 attempts.jsonl in a sweep's job was a traceback in collect and report (d2cc091: a
    UnicodeDecodeError from attempts.py). Now one line naming the file."""
    sweep = Path(shutil.copytree(failed_sweep, tmp_path / "sweep"))
    shutil.copytree(runs / "whole", sweep / "2")
    (sweep / "0" / "attempts.jsonl").write_bytes(b'{"attempt": "a", "note": "\xff"}\n')
    for call in (
        lambda: collect.main(["table", str(sweep), "--no-figures"]),
        lambda: report_cli.main([str(sweep)]),
    ):
        assert call() == 2
        line = _err(capsys)
        assert str(sweep / "0" / "attempts.jsonl") in line and "not UTF-8" in line, line


def test_out_of_range_seeds_and_digits_are_one_line(runs, capsys):
    """`--seed -1` in harness-compare and harness-report, `harness-collect table --digits -5` were
    tracebacks (numpy's seed range, a format spec). Now one line each, before any work."""
    from harness.runtime import compare

    whole = str(runs / "whole")
    for call, flag in [
        (lambda: compare.main([whole, whole, "--seed", "-1"]), "--seed=-1"),
        (lambda: report_cli.main([whole, "--seed", "-1"]), "--seed=-1"),
        (lambda: collect.main(["table", whole, "--digits", "-5", "--no-figures"]), "--digits=-5"),
    ]:
        assert call() == 2
        assert f"{flag} is invalid" in _err(capsys)


def test_document_ids_named_like_object_properties_keep_the_pair_table(tmp_path):
    """Document ids `__proto__` and `constructor` broke the page's pair table (0 rows) when the
    texts were gone: the page's JavaScript looked them up on a plain object and reached
    Object.prototype. Now only own properties are read: both rows drawn, with texts and without."""
    from helpers.cli import run_in_process

    from harness.bench.browser import Chromium, find_chromium

    if find_chromium() is None:
        pytest.skip("no Chromium (Debian: apt-get install chromium)")
    rows = [
        {"doc_id": d, "source": f"source of {d}", "candidate_id": c, "text": f"{c} text of {d}"}
        for d in ("__proto__", "constructor")
        for c in ("x", "y")
    ]
    data = tmp_path / "ids.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = tmp_path / "run"
    args = ["experiment=judge", "model=tiny_llama", "task=jsonl", f"task.path={data}"]
    r = run_in_process([*args, f"hydra.run.dir={run}", "wandb.mode=disabled", "progress=false"], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    with Chromium() as browser:
        for texts in (True, False):
            if not texts:
                data.unlink()
                assert report_cli.main([str(run)]) == 0
            got = browser.load(run / "report.html")
            assert got.errors == [], got.errors
            drawn = browser.evaluate("document.querySelectorAll('#pairs-body tr.pair').length")
            assert drawn == 2, (texts, drawn)


def test_a_run_of_too_many_pairs_is_one_line_before_any_work(tmp_path):
    """One document with 5,000 candidates and no task.max_candidates: no pair-count check; memory
    reached 5.2 GB in 80 s before any model call. Now one line names the count and
    task.max_candidates, before the judge is built (1,500 candidates here). Control:
    task.max_candidates=3 runs."""
    from helpers.cli import assert_one_line_error, run_in_process

    rows = [{"doc_id": "big", "source": "s", "candidate_id": f"c{i}", "text": f"t{i}"} for i in range(1500)]
    data = tmp_path / "big.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["experiment=judge", "model=tiny_llama", "task=jsonl", f"task.path={data}", "wandb.mode=disabled"]
    r = run_in_process([*args, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    assert_one_line_error(r, "2,248,500 ordered pairs", "more than the 1,000,000", "task.max_candidates=N")
    assert not (tmp_path / "run" / "judgments.jsonl").exists()
    r = run_in_process([*args, "task.max_candidates=3", f"hydra.run.dir={tmp_path / 'ok'}"], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.parametrize(
    "args, env, want",
    [
        (["hydra.run.dir=."], {}, "hydra.run.dir resolves to the current folder"),
        (["-m", "hydra.sweep.dir=./", "seed=0,1"], {}, "hydra.sweep.dir resolves to the current folder"),
        ([], {"HARNESS_CACHE": ""}, "HARNESS_CACHE is set but empty"),
    ],
    ids=["run dir .", "sweep dir ./", "empty HARNESS_CACHE"],
)
def test_the_current_folder_and_an_empty_cache_variable_are_refused(tmp_path, args, env, want):
    """`hydra.run.dir=.` or `hydra.sweep.dir=.` overwrote a results.json or multirun.yaml in the
    current folder (the empty spellings were refused for that reason already); an empty
    HARNESS_CACHE made the request cache /requests.sqlite. Now one line each, nothing written."""
    from helpers.cli import assert_one_line_error, run_harness

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "results.json").write_text('{"keep": true}')
    (cwd / "multirun.yaml").write_text("keep: true\n")
    extra = [] if args else [f"hydra.run.dir={tmp_path / 'run'}"]
    r = run_harness(
        [*args, *extra, "experiment=judge", "model=tiny_llama", "wandb.mode=disabled"],
        tmp_path,
        env=env,
        cwd=cwd,
        timeout=120,
    )
    assert_one_line_error(r, want)
    assert sorted(p.name for p in cwd.iterdir()) == ["multirun.yaml", "results.json"]
    assert (cwd / "results.json").read_text() == '{"keep": true}'
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("value", ["abc", "{a: 1}", "[1,2]"])
def test_an_engine_argument_of_the_wrong_type_is_one_line_before_any_work(tmp_path, value):
    """`+backend.engine_args.max_num_seqs=abc` (or a dict, a list) was vLLM EngineArgs' TypeError
    after ~30 s. Now each value is checked against EngineArgs' annotation at the config check: one
    line naming the key and the type. Control: an int passes the same check (config checks only)."""
    pytest.importorskip("vllm")
    from helpers.cli import assert_one_line_error, run_in_process

    from harness.judges.settings import check_engine_args

    r = run_in_process(
        [
            "experiment=judge",
            "model=tiny_llama",
            "backend=vllm",
            f"+backend.engine_args.max_num_seqs={value}",
            f"hydra.run.dir={tmp_path / 'run'}",
            "wandb.mode=disabled",
        ],
        tmp_path,
    )
    assert_one_line_error(r, "backend.engine_args.max_num_seqs=", "(int | None)")
    assert not (tmp_path / "run" / "judgments.jsonl").exists()
    check_engine_args({"max_num_seqs": 4, "kv_cache_dtype": "fp8", "compilation_config": {"level": 0}})


def test_jobs_outside_the_sweep_folder_are_collected_and_linked(runs, tmp_path, capsys):
    """hydra.sweep.subdir=../x_${hydra.job.num} puts a sweep's jobs beside its folder: collect and
    report said "nothing finished yet?" though both finished. Now the jobs multirun.yaml lists are
    found where the subdir puts them: both rows in the table, both linked (relative, ../) on the
    index."""
    from helpers.cli import run_in_process

    sweep = tmp_path / "sweep"
    r = run_in_process(
        [
            "-m",
            "experiment=judge",
            "model=tiny_llama",
            "task=jsonl",
            f"task.path={runs / 'mine.jsonl'}",
            "task.max_candidates=2",
            "metrics.bootstrap=0",
            "seed=0,1",
            f"hydra.sweep.dir={sweep}",
            "hydra.sweep.subdir=../x_${hydra.job.num}",
            "wandb.mode=disabled",
            "progress=false",
        ],
        tmp_path,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "x_0" / "results.json").is_file() and (tmp_path / "x_1" / "results.json").is_file()
    assert collect.main(["table", str(sweep), "--out", str(tmp_path / "t"), "--no-figures"]) == 0
    assert [ln.split(",")[0] for ln in (tmp_path / "t" / "table.csv").read_text().splitlines()[1:]] == [
        "0",
        "1",
    ]
    assert report_cli.main([str(sweep)]) == 0
    page = (sweep / "index.html").read_text()
    assert "href='./../x_0/report.html'" in page and "href='./../x_1/report.html'" in page
    assert "2 jobs, 2 finished" in page
