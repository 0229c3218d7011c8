"""scripts/gpu_check.py as the device machine runs it: no omegaconf, no hydra, no vLLM there.

Its full CPU dry run (every check, vLLM's CPU build included) is tests/test_bench.py::test_gpu_check_dry_run.
Here the same script runs with those packages made unimportable (`sys.modules[name] = None`, which
makes `import name` raise and `importlib.util.find_spec(name)` return None, as on a machine without
them): the script imports (HFJudge and the model loader with it) and finds a tiny model's folder,
vLLM says NOT RUN, and the exit status says partial. (The devices check itself is left to the
full dry run: it costs ~30 s on 2 cores and imports nothing more than torch/transformers.)
"""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO

ABSENT = ("omegaconf", "hydra", "vllm")
RUNNER = ("import sys\nfor name in {absent!r}: sys.modules[name] = None\n"
          "sys.path.insert(0, {scripts!r})\n{body}\n")


def _run(body: str, tmp_path) -> subprocess.CompletedProcess:
    code = RUNNER.format(absent=ABSENT, scripts=str(REPO / "scripts"), body=body)
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)


def test_gpu_check_without_omegaconf_hydra_vllm_is_partial(tmp_path, shared_data, tiny_llama):
    out = tmp_path / "gpu.json"
    r = _run("import gpu_check\nprint('tiny:', gpu_check.resolve_model_path('tiny:llama')[0])\n"
             "sys.exit(gpu_check.main(['--dry-run', '--checks', 'vllm', '--data-dir', "
             f"{str(shared_data)!r}, '--out', {str(out)!r}]))", tmp_path)
    assert r.returncode == 3, r.stderr[-3000:]  # partial: every check that ran passed, some did not run
    lines = r.stdout.splitlines()
    assert f"tiny: {tiny_llama}" in lines and "vLLM: NOT RUN (not installed)" in lines
    assert "devices: NOT RUN (not chosen (--checks))" in lines
    assert "gpu_check: PARTIAL (not run: devices, prefix, vllm, bench)" in lines
    result = json.loads(out.read_text())
    assert result["status"] == "partial" and result["ok"] is False and result["vllm"] == {"not_run": "not installed"}


def test_the_blocker_catches_an_import_of_omegaconf(tmp_path):
    """Negative control: the same blocking makes the Hydra entry (which needs omegaconf) fail to import."""
    r = _run("import harness.runtime.entry", tmp_path)
    assert r.returncode != 0 and "halted; None in sys.modules" in r.stderr, r.stderr[-2000:]


def test_gpu_check_refuses_an_unknown_check(tmp_path):
    r = _run("import gpu_check\nsys.exit(gpu_check.main(['--dry-run', '--checks', 'devices,gpus']))", tmp_path)
    assert r.returncode == 2 and r.stderr.strip() == ("error: --checks gpus: unknown; choose from "
                                                     "devices,prefix,vllm,bench")
