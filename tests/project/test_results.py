"""results.json as a typed, versioned record (harness.results.RunResults): every writer stamps the
version; a file without one (written before it) is migrated on read; a newer or malformed version
is refused in one line naming the file and the version, by the reader and by harness-collect."""

from __future__ import annotations

import json
import re

import pytest

from harness.errors import DataError
from harness.results import VERSION, RunResults, write_results
from harness.runtime.collect import main as collect


def test_written_with_its_version_and_read_as_attributes(tmp_path):
    path = tmp_path / "results.json"
    written = write_results(path, {"task": "summeval", "n_docs": 3, "metrics": {"none": {"a_rate": 0.5}}})
    on_disk = json.loads(path.read_text())
    assert on_disk["version"] == VERSION == 2 and next(iter(on_disk)) == "version"
    read = RunResults.read(path)
    assert read == written == on_disk and read.migrated_from is None
    assert (read.task, read.n_docs, read.metrics["none"]["a_rate"], read.intervals) == (
        "summeval",
        3,
        0.5,
        None,
    )
    assert isinstance(read, dict) and json.loads(json.dumps(read)) == on_disk  # the dict it always was


def test_an_older_file_is_migrated(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"task": "summeval", "metrics": {}}))  # version 1: no version key
    read = RunResults.read(path)
    assert read.migrated_from == 1 and read.version == VERSION and read.task == "summeval"


@pytest.mark.parametrize(
    ("version", "says"),
    [(3, "version 3 is newer than this harness reads (2): upgrade harness"), ("2", "version '2' is not one")],
)
def test_an_unreadable_version_is_refused_in_one_line(tmp_path, capsys, version, says):
    run = tmp_path / "runs" / "0"
    run.mkdir(parents=True)
    (run / "results.json").write_text(json.dumps({"version": version, "metrics": {"none": {"a_rate": 0.5}}}))
    with pytest.raises(DataError, match=re.escape(f"results.json, field 'version': {says}")):
        RunResults.read(run / "results.json")
    # the command that reads it: one line naming the file and the version, exit 2, no traceback
    assert collect(["table", str(tmp_path / "runs"), "--no-figures", "--metrics", "none/a_rate"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(run / "results.json") in err and says in err
