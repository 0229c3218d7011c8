"""Pinned fetch: sources.tsv vs MANIFEST, mirror copies, skip-if-present, checksum mismatch, and
downloads from a real HTTP server on 127.0.0.1 laid out like raw.githubusercontent.com."""

from __future__ import annotations

import csv
import hashlib
import http.server
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from harness.data import TASKS, fetch, load_task
from harness.data.fetch import ensure_data, main, select
from harness.data.manifest import RAW_BASE, parse_sources, source_url, sources
from harness.errors import ConfigError, DataError

REPO = Path(__file__).resolve().parents[2]
SMALL = ["llmbar_natural", "usr_zepo"]  # two tasks, ~300 KB: quick to copy and hash


def _by_file():
    return {s.file: s for s in sources()}


def test_sources_tsv_matches_manifest(shared_data):
    with (shared_data / "MANIFEST.tsv").open(newline="") as f:
        manifest = list(csv.DictReader(f, delimiter="\t"))
    table = sources()
    assert [s.file for s in table] == [r["file"] for r in manifest]
    for s, r in zip(table, manifest):
        assert (s.repo, s.commit, s.path, s.sha256, s.size) == (
            r["upstream_repo"],
            r["commit"],
            r["upstream_path"],
            r["sha256"],
            int(r["bytes"]),
        )
        assert len(s.commit) == 40 and len(s.sha256) == 64


def test_mirror_files_match_their_pinned_hashes(shared_data):
    # What CI copies from must itself be the pinned bytes (guards the mirror and sources.tsv).
    for s in sources():
        if s.size < 2_000_000:
            assert hashlib.sha256((shared_data / s.file).read_bytes()).hexdigest() == s.sha256, s.file


def test_url_construction():
    s = _by_file()["summeval/data.pkl"]
    assert source_url(s) == (
        "https://raw.githubusercontent.com/neulab/BARTScore/"
        "248f511cb34ae3753fc81f7d7a945de5bfe33458/SUM/SummEval/data.pkl"
    )
    s = _by_file()["arena_hard_v0.1/question.jsonl"]
    assert source_url(s) == (
        f"{RAW_BASE}/lmarena/arena-hard-auto/196f6b826783b3da7310e361a805fa36f0be83f3/"
        "data/arena-hard-v0.1/question.jsonl"
    )
    assert source_url(s, "http://127.0.0.1:8000/").startswith("http://127.0.0.1:8000/lmarena/")


def test_parse_sources_rejects_bad_tables():
    with pytest.raises(DataError, match="header"):
        parse_sources("file\trepo\n")
    with pytest.raises(DataError, match="record 1"):
        parse_sources("file\tupstream_repo\tcommit\tupstream_path\tsha256\tbytes\na\tb\tc\td\te\tnot-int\n")


def test_select_by_task_folder_and_file():
    assert [s.file for s in select(["summeval"])] == ["summeval/data.pkl"]
    bench = {s.file for s in select(["arena_bench"])}
    assert set(TASKS["arena_bench"].files) < bench
    assert "arena-bench-v1/reference_answer/gpt-4.jsonl" in bench and "arena-bench-v1_config.yaml" in bench
    assert {s.file for s in select(["arena_hard_v0.1/model_answer"])} == set(TASKS["arena_hard"].files[1:])
    assert [s.file for s in select(["zepo"])] == ["zepo/init_prompts.json"]
    assert len(select(None)) == len(sources()) and select([]) == []
    with pytest.raises(ConfigError, match="'summevel'"):
        select(["summevel"])


def test_mirror_copy_then_skip_if_present(shared_data, tmp_path):
    dest = tmp_path / "dest"
    first = ensure_data(dest, mirror=shared_data, only=SMALL)
    files = [f for name in SMALL for f in TASKS[name].files]
    assert [(r.file, r.action) for r in first] == [
        (f, "copied") for f in sorted(files, key=list(_by_file()).index)
    ]
    for f in files:
        assert (dest / f).read_bytes() == (shared_data / f).read_bytes()
    mtimes = {f: (dest / f).stat().st_mtime_ns for f in files}
    # Present and verified: nothing is copied, and no network is needed (mirror=None).
    again = ensure_data(dest, mirror=None, only=SMALL)
    assert Counter(r.action for r in again) == {"present": len(files)}
    assert {f: (dest / f).stat().st_mtime_ns for f in files} == mtimes
    assert not list(dest.rglob("*.part"))
    assert len(load_task("usr_zepo", data_dir=dest)) == 60


def test_wrong_copy_at_dest_is_replaced(shared_data, tmp_path):
    target = tmp_path / "llmbar/Natural/dataset.json"
    target.parent.mkdir(parents=True)
    target.write_text("[]")
    (result,) = ensure_data(tmp_path, mirror=shared_data, only=["llmbar_natural"])
    assert result.action == "copied"
    assert target.read_bytes() == (shared_data / result.file).read_bytes()


def _bad_mirror(shared_data: Path, tmp_path: Path, corrupt: str) -> Path:
    mirror = tmp_path / "mirror"
    for s in sources():
        (mirror / s.file).parent.mkdir(parents=True, exist_ok=True)
        if s.file == corrupt:
            data = bytearray((shared_data / s.file).read_bytes())
            data[len(data) // 2] ^= 0x01  # one flipped bit
            (mirror / s.file).write_bytes(bytes(data))
        else:
            (mirror / s.file).symlink_to(shared_data / s.file)
    return mirror


def test_checksum_mismatch_from_mirror(shared_data, tmp_path):
    file = "usr_zepo/topicalchat_usr.json"
    mirror = _bad_mirror(shared_data, tmp_path, file)
    dest = tmp_path / "dest"
    with pytest.raises(DataError) as info:
        ensure_data(dest, mirror=mirror, only=["usr_zepo"])
    msg = str(info.value)
    got = hashlib.sha256((mirror / file).read_bytes()).hexdigest()
    assert "\n" not in msg and msg.startswith(f"{file}: sha256 mismatch")
    assert _by_file()[file].sha256 in msg and got in msg
    assert not (dest / file).exists() and not list(dest.rglob("*.part"))


def test_cli_exit_codes(shared_data, tmp_path, capsys):
    mirror = _bad_mirror(shared_data, tmp_path, "summeval/data.pkl")
    assert main(["--dest", str(tmp_path / "d"), "--mirror", str(mirror), "--only", "summeval"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: summeval/data.pkl: sha256 mismatch") and err.count("\n") == 1
    assert (
        main(["--dest", str(tmp_path / "d"), "--mirror", str(shared_data), "--only", "llmbar_natural,zepo"])
        == 0
    )
    assert "2 file(s) verified" in capsys.readouterr().out
    assert main(["--dest", str(tmp_path / "d"), "--only", "nope", "-q"]) == 2
    assert main(["--dest", str(tmp_path / "d"), "--mirror", str(tmp_path / "absent"), "-q"]) == 2


def test_module_entry_point(shared_data, tmp_path):
    """`python -m harness.data.fetch` itself: exit 0 on a verified copy, 2 with one error line."""
    cmd = [sys.executable, "-m", "harness.data.fetch", "--dest", str(tmp_path), "--only", "zepo"]
    ok = subprocess.run(
        [*cmd, "--mirror", str(shared_data)], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run([*cmd, "--only", "x"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert (
        bad.returncode == 2 and bad.stderr.startswith("error: --only: 'x'") and "Traceback" not in bad.stderr
    )


# ---------------------------------------------------------------- downloads over loopback HTTP


class _RawServer:
    """Serves <repo>/<commit>/<upstream path> from a mirror, like raw.githubusercontent.com.

    `fail_first` answers 503 to the first request of each path (to exercise retries);
    `corrupt` serves flipped bytes for that local file."""

    def __init__(self, mirror: Path, fail_first: bool = False, corrupt: str | None = None) -> None:
        routes = {"/" + source_url(s, "").lstrip("/"): s.file for s in sources()}
        self.hits: Counter = Counter()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's naming)
                server.hits[self.path] += 1
                file = routes.get(self.path)
                if file is None:
                    self.send_error(404)
                    return
                if fail_first and server.hits[self.path] == 1:
                    self.send_error(503)
                    return
                body = (mirror / file).read_bytes()
                if file == corrupt:
                    body = body[:-1] + bytes([body[-1] ^ 1])
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def raw_server(shared_data):
    servers = []

    def start(**kw) -> _RawServer:
        servers.append(_RawServer(shared_data, **kw))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def test_download_verifies_and_retries(raw_server, shared_data, tmp_path, monkeypatch):
    monkeypatch.setattr(fetch, "BACKOFF_S", 0.01)
    server = raw_server(fail_first=True)
    results = ensure_data(tmp_path, only=["llmbar_natural", "zepo"], base_url=server.url, timeout=10)
    assert [r.action for r in results] == ["downloaded", "downloaded"]
    assert all(n == 2 for n in server.hits.values()) and len(server.hits) == 2  # 503, then 200
    for r in results:
        assert (tmp_path / r.file).read_bytes() == (shared_data / r.file).read_bytes()
    assert load_task("llmbar_natural", data_dir=tmp_path)[0].gold == "1"


def test_download_checksum_mismatch_and_http_errors(raw_server, tmp_path, monkeypatch):
    monkeypatch.setattr(fetch, "BACKOFF_S", 0.01)
    file = "llmbar/Natural/dataset.json"
    server = raw_server(corrupt=file)
    with pytest.raises(
        DataError, match=r"sha256 mismatch: expected [0-9a-f]{64}, got [0-9a-f]{64} \(from http://127"
    ):
        ensure_data(tmp_path, only=[file], base_url=server.url)
    assert not (tmp_path / file).exists() and not list(tmp_path.rglob("*.part"))
    # A 404 will not change on retry: one request, a one-line error with the URL.
    with pytest.raises(DataError, match="HTTP 404") as info:
        ensure_data(tmp_path, only=[file], base_url=server.url + "/wrong")
    assert sum(server.hits.values()) == 2 and "\n" not in str(info.value)
    # Nothing listening: retried, then reported.
    with pytest.raises(DataError, match="after 2 tries"):
        ensure_data(tmp_path, only=[file], base_url="http://127.0.0.1:9", retries=2, timeout=2)
