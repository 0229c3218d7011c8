"""Every experiment that judges documents records which data it judged (results.json
`documents_sha256`), and harness-report warns when the data it loads now is not that data: a ZEPO
run (eval_initial/, eval_best/), a sensitivity study (instructions/NNN/), an A-BB run and a
pointwise run showed edited texts beside the old numbers with no word (only judge runs were
checked). Each is a real run of the shipped config (tiny Llama judge, 3 documents of 3 candidates in
a JSONL file; ZEPO's optimizer is the loopback server's scripted replies), reported twice: on the
unchanged data (control: no warning, the texts shown), then after one candidate's text is edited."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers.cli import run_in_process

from harness.runtime import report_cli

pytestmark = pytest.mark.slow  # four whole experiments (a ZEPO search, a sensitivity study, A-BB)

COMMON = [
    "model=tiny_llama",
    "task=jsonl",
    "task.max_candidates=3",
    "metrics.bootstrap=0",
    "wandb.mode=disabled",
    "progress=false",
]
EXPERIMENTS = {
    "sensitivity": ["experiment=sensitivity", "task.aspect=overall", "experiment.shuffles=2"],
    "pointwise": ["experiment=pointwise", "task.aspect=coherence"],
    "abb": [
        "experiment=abb",
        "task.aspect=overall",
        "experiment.kinds=[formatting,swap]",
        "experiment.estimate=6",
        "experiment.verify=6",
        "experiment.jitter.samples=2",
        "experiment.bootstrap=20",
    ],
    "zepo": [
        "experiment=zepo",
        "task.aspect=overall",
        "experiment.search_docs=1",
        "experiment.population=2",
        "experiment.epochs=1",
        "experiment.shuffles=2",
        "optimizer=api",
        "optimizer.model=scripted-loopback",
        "optimizer.timeout_s=5",
    ],
}
EDITED = "summary 2 1"  # a candidate every experiment judges (document d2: ZEPO evaluates it)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_llama):
    """One finished run of each experiment on the same data file."""
    from helpers.scripted import scripted_completion
    from helpers.servers import OpenAIServer

    tmp = tmp_path_factory.mktemp("fingerprint")
    rows = [
        {
            "doc_id": f"d{d}",
            "source": f"source text {d}",
            "candidate_id": f"c{c}",
            "text": f"summary {d} {c}",
            "scores": {"overall": float(c + d), "coherence": float(c)},
        }
        for d in range(3)
        for c in range(3)
    ]
    (tmp / "mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp / "para.txt").write_text(
        "Which summary is better overall? Answer A or B.\n"
        "Overall, which of the two summaries is better? Answer A or B.\n"
    )
    extra = {"sensitivity": [f"experiment.from_file={tmp / 'para.txt'}"]}
    with OpenAIServer(script=scripted_completion) as srv:
        extra["zepo"] = [f"optimizer.base_url={srv.url}"]
        for name, args in EXPERIMENTS.items():
            where = [f"task.path={tmp / 'mine.jsonl'}", f"hydra.run.dir={tmp / name}"]
            r = run_in_process([*args, *COMMON, *where, *extra.get(name, [])], tmp)
            assert r.returncode == 0, r.stderr[-3000:]
    return tmp


def _warnings(capsys) -> list[str]:
    return [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning: ")]


@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_the_report_of_every_experiment_says_when_its_data_changed(runs, tmp_path, capsys, name):
    run = Path(shutil.copytree(runs / name, tmp_path / name))
    data = Path(shutil.copy(runs / "mine.jsonl", tmp_path / "mine.jsonl"))
    config = json.loads((run / "config.json").read_text())
    config["task"]["path"] = str(data)  # the run as if made on this copy of the data
    (run / "config.json").write_text(json.dumps(config))
    assert report_cli.main([str(run)]) == 0
    assert _warnings(capsys) == []  # control: the data the run judged
    # A-BB's page shows no candidate texts; every other page shows the judged texts.
    assert (EDITED in (run / "report.html").read_text()) == (name != "abb")
    data.write_text(data.read_text().replace(EDITED, "an edited summary"))
    assert report_cli.main([str(run)]) == 0
    warnings = _warnings(capsys)
    assert len(warnings) == 1, warnings
    assert "the task's data changed since the run: 1 of its 3 documents differ (first: 'd2')" in warnings[0]
    page = (run / "report.html").read_text()
    assert "data changed since the run" in page.replace("&#x27;", "'")
    assert "an edited summary" not in page and EDITED not in page
    if name == "abb":  # recorded once, in results.json: abb.json (the rest of its record) has none
        assert "documents_sha256" not in (run / "abb.json").read_text()
