"""Tracking: secrets never reach config files or W&B; local files hold every logged number."""

from __future__ import annotations

import json

from harness.redaction import redact
from harness.runtime.tracking import Tracker


def test_redact_hides_secret_values_but_keeps_names_and_counts():
    cfg = {
        "backend": {"api_key": "sk-live-123", "api_key_env": "OPENAI_API_KEY", "hf_token": "hf_abc"},
        "optimizer": {"max_new_tokens": 160, "top_logprobs": 20},
    }
    out = redact(cfg)
    assert out["backend"]["api_key"] == "<redacted>" and out["backend"]["hf_token"] == "<redacted>"
    assert out["backend"]["api_key_env"] == "OPENAI_API_KEY"
    assert out["optimizer"] == {"max_new_tokens": 160, "top_logprobs": 20}


def test_tracker_offline_writes_local_files_and_wandb_run(tmp_path):
    t = Tracker(tmp_path, mode="offline", run_config={"backend": {"api_key": "sk-live-123"}, "seed": 1})
    t.log({"fairness": -0.1, "nan_metric": float("nan")}, step=0)
    t.log_table("judgments", ["doc", "p_a"], [["d1", 0.7]])
    t.finish()
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["fairness"] == -0.1 and rows[0]["nan_metric"] is None
    assert json.loads((tmp_path / "tables" / "judgments.jsonl").read_text()) == {"doc": "d1", "p_a": 0.7}
    assert list((tmp_path / "wandb").glob("offline-run-*"))
    leaked = [p for p in tmp_path.rglob("*") if p.is_file() and b"sk-live-123" in p.read_bytes()]
    assert not leaked, leaked


def test_a_finished_run_has_its_records_on_disk(tmp_path):
    """When finish() returns, the offline run-*.wandb file holds the run's records, not only its
    7-byte header (`:W&B` + version): what `wandb sync` uploads is the whole run. Without the
    teardown in Tracker.finish, 3 of 6 runs held only the header right after finish (measured by
    hand, wandb 0.31.0, 2026-12-06; the file was whole 1.5 s later), so three runs here would
    catch it 7 times in 8."""
    for i in range(3):
        t = Tracker(tmp_path / str(i), mode="offline", run_config={"judge": f"tiny|w=marker{i}"})
        t.log({"x": 1.0}, step=0)
        t.finish()
        (f,) = (tmp_path / str(i) / "wandb").glob("offline-run-*/run-*.wandb")
        assert f"marker{i}".encode() in f.read_bytes(), f"{f}: {f.stat().st_size} bytes"


def test_the_judgments_table_at_summevals_size_is_declared_not_inferred(tmp_path):
    """24,000 rows (SummEval's judgments) reach W&B in under 1 CPU-second: the columns' types are
    declared once (JUDGMENT_TYPES) and each cell checked, instead of W&B inferring every row's.
    The table file in the run's W&B artifact holds every row (a logged table is cut at 10,000),
    NaN as null, and W&B's own header for the declared columns; control: a cell of the wrong type is one
    TypeError naming the row and column."""
    import time

    import pytest

    from harness.runtime.tracking import JUDGMENT_COLUMNS, JUDGMENT_TYPES

    text = "A summary of about sixty words, as SummEval's are. " * 8  # 400 characters
    rows = [
        [f"d{i // 240}", f"s{i % 16}", f"s{i % 15}", 0.25, float("nan") if i == 7 else 0.5, "", 3.0, 2.5]
        + [None, text, text, text, "Which summary is better?", text]
        for i in range(24_000)
    ]
    t = Tracker(tmp_path, mode="offline")
    start = time.process_time()
    t.log_table("judgments", JUDGMENT_COLUMNS, rows, JUDGMENT_TYPES)
    took = time.process_time() - start
    t.finish()
    (saved,) = (tmp_path / "wandb").rglob("judgments.table.json")
    table = json.loads(saved.read_text())
    assert table["columns"] == JUDGMENT_COLUMNS and len(table["data"]) == table["nrows"] == 24_000
    assert table["_type"] == "table" and "gold_a" in json.dumps(table["column_types"])
    assert table["data"][7][4] is None and table["data"][8][4] == 0.5
    assert took < 1.0, f"{took:.2f} CPU-s"

    t = Tracker(tmp_path / "bad", mode="offline")
    rows[123][3] = "0.25"
    with pytest.raises(TypeError, match="row 123 column 'p_a': str '0.25', declared float"):
        t.log_table("judgments", JUDGMENT_COLUMNS, rows[:200], JUDGMENT_TYPES)
    t.finish()


def test_the_judgments_table_holds_each_prompt_as_a_template_of_its_own_cells():
    """The `prompt_template` cell, formatted with its row's cells (row_prompt), is the prompt the
    judge was given (harness.prompts.render), for every family, with and without a context, where
    the texts hold braces and slot names ("{b_text}") and the instruction has spaces around it; a
    SummEval-like table is then about half as large as with the prompt in full (the source and
    both texts are in it once, not twice). Control: the template filled with another row's texts
    is not that row's prompt."""
    from harness.prompts import FAMILIES, render
    from harness.records import Candidate, Document, Judgment
    from harness.runtime.tracking import JUDGMENT_COLUMNS, judgment_rows, row_prompt

    for family in FAMILIES:
        for context in ("", "Fact {b_text} }{ x"):
            doc = Document(
                "d",
                "An article {a_text} {0} " * 100,
                (Candidate("s1", "A summary {source} " * 10), Candidate("s2", "B {instruction}} " * 10)),
                context=context,
            )
            judged = [Judgment("d", "s1", "s2", 0.5, {}), Judgment("d", "s2", "s1", 0.5, {})]
            for instruction in (" Which is better? {b_text} ", "Which?"):
                rows = judgment_rows(judged, [doc], instruction, family)
                rows = [dict(zip(JUDGMENT_COLUMNS, r)) for r in rows]
                a, b = doc.candidates
                assert row_prompt(rows[0]) == render(doc, a, b, instruction, family)
                assert row_prompt(rows[1]) == render(doc, b, a, instruction, family)
                assert row_prompt({**rows[0], "a_text": b.text, "b_text": a.text}) != row_prompt(rows[0])
                full = render(doc, a, b, instruction, family)
                with_prompts = len(json.dumps([*rows[0].values(), full]))
                assert len(json.dumps(list(rows[0].values()))) < 0.6 * with_prompts
    assert row_prompt(dict(zip(JUDGMENT_COLUMNS, judgment_rows(judged, [doc])[0]))) is None
