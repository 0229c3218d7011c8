"""`harness-bench gpu` as the device machine runs it: no omegaconf, no hydra, no vLLM there.

Its full CPU dry run (every check, vLLM's CPU build included) is tests/test_bench.py::test_gpu_dry_run.
Here the same command runs with those packages made unimportable (`sys.modules[name] = None`, which
makes `import name` raise and `importlib.util.find_spec(name)` return None, as on a machine without
them), as `python -m harness.bench gpu ...` runs it (runpy, the command line in sys.argv): the
package imports (HFJudge and the model loader with it) and finds a tiny model's folder, vLLM says
NOT RUN, and the exit status says partial. (The devices check itself is left to the full dry run:
it costs ~30 s on 2 cores and imports nothing more than torch/transformers.)
"""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO

ABSENT = ("omegaconf", "hydra", "vllm")
RUNNER = ("import runpy, sys\nfor name in {absent!r}: sys.modules[name] = None\n{body}\n")


def _run(body: str, tmp_path) -> subprocess.CompletedProcess:
    code = RUNNER.format(absent=ABSENT, body=body)
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600)


def _command(argv: list[str]) -> str:
    """`python -m harness.bench ARGV`, in the blocked interpreter."""
    return f"sys.argv = ['harness-bench', *{argv!r}]\nrunpy.run_module('harness.bench', run_name='__main__')"


def test_gpu_without_omegaconf_hydra_vllm_is_partial(tmp_path, shared_data, tiny_llama):
    out = tmp_path / "gpu.json"
    r = _run("from harness.models.resolve import resolve_model_path\n"
             "print('tiny:', resolve_model_path('tiny:llama')[0])\n"
             + _command(["gpu", "--dry-run", "--checks", "vllm", "--data-dir", str(shared_data), "--json", str(out)]),
             tmp_path)
    assert r.returncode == 3, r.stderr[-3000:]  # partial: every check that ran passed, some did not run
    lines = r.stdout.splitlines()
    assert f"tiny: {tiny_llama}" in lines and "vLLM: NOT RUN (not installed)" in lines
    assert "devices: NOT RUN (not chosen (--checks))" in lines
    assert "harness-bench gpu: PARTIAL (not run: devices, prefix, vllm, bench)" in lines
    result = json.loads(out.read_text())
    assert result["status"] == "partial" and result["ok"] is False and result["vllm"] == {"not_run": "not installed"}


def test_the_blocker_catches_an_import_of_omegaconf(tmp_path):
    """Negative control: the same blocking makes the Hydra entry (which needs omegaconf) fail to import."""
    r = _run("import harness.runtime.entry", tmp_path)
    assert r.returncode != 0 and "halted; None in sys.modules" in r.stderr, r.stderr[-2000:]


def test_gpu_refuses_an_unknown_check(tmp_path):
    r = _run(_command(["gpu", "--dry-run", "--checks", "devices,gpus"]), tmp_path)
    assert r.returncode == 2 and r.stderr.strip().endswith(
        "error: argument --checks: 'devices,gpus': give distinct names from devices, prefix, vllm, bench "
        "(comma-separated)")
