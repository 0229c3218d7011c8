"""`harness-bench gpu` as the device machine runs it: no omegaconf, no hydra, no vLLM there.

Its full CPU dry run (every check, vLLM's CPU build included) is tests/bench/test_bench.py::test_gpu_dry_run.
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

from helpers import REPO

ABSENT = ("omegaconf", "hydra", "vllm")
RUNNER = "import runpy, sys\nfor name in {absent!r}: sys.modules[name] = None\n{body}\n"


def _run(body: str, tmp_path) -> subprocess.CompletedProcess:
    code = RUNNER.format(absent=ABSENT, body=body)
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600)


def _command(argv: list[str]) -> str:
    """`python -m harness.bench ARGV`, in the blocked interpreter."""
    return f"sys.argv = ['harness-bench', *{argv!r}]\nrunpy.run_module('harness.bench', run_name='__main__')"


def test_gpu_without_omegaconf_hydra_vllm_is_partial(tmp_path, shared_data, tiny_llama):
    out = tmp_path / "gpu.json"
    r = _run(
        "from harness.models.resolve import resolve_model_path\n"
        "print('tiny:', resolve_model_path('tiny:llama')[0])\n"
        + _command(
            ["gpu", "--dry-run", "--checks", "vllm", "--data-dir", str(shared_data), "--json", str(out)]
        ),
        tmp_path,
    )
    assert r.returncode == 3, r.stderr[-3000:]  # partial: every check that ran passed, some did not run
    lines = r.stdout.splitlines()
    assert f"tiny: {tiny_llama}" in lines and "vLLM: NOT RUN (not installed)" in lines
    assert "devices: NOT RUN (not chosen (--checks))" in lines
    assert "harness-bench gpu: PARTIAL (not run: devices, prefix, vllm, bench)" in lines
    result = json.loads(out.read_text())
    assert (
        result["status"] == "partial"
        and result["ok"] is False
        and result["vllm"] == {"not_run": "not installed"}
    )


def test_the_blocker_catches_an_import_of_omegaconf(tmp_path):
    """Negative control: the same blocking makes the Hydra entry (which needs omegaconf) fail to import."""
    r = _run("import harness.runtime.entry", tmp_path)
    assert r.returncode != 0 and "halted; None in sys.modules" in r.stderr, r.stderr[-2000:]


def test_gpu_refuses_an_unknown_check(tmp_path):
    r = _run(_command(["gpu", "--dry-run", "--checks", "devices,gpus"]), tmp_path)
    assert r.returncode == 2 and r.stderr.strip().endswith(
        "error: argument --checks: 'devices,gpus': give distinct names from devices, prefix, vllm, bench "
        "(comma-separated)"
    )


def test_the_projection_and_the_carried_llama3_tokenizer(tmp_path):
    """The projected SummEval wall time is its prompts over each measured transformers rate of the
    one-instruction workload (a path not measured, another workload or a variant are left out),
    printed beside the floor; the carried tokenizer folder loads as Llama-3's (its answer ids and
    chat header)."""
    from transformers import AutoTokenizer

    from harness.bench.gpu_projection import projection, projection_lines, save_llama3_tokenizer

    def row(label, engine, workload, rate):
        return {
            "name": f"{label}_{workload}_bfloat16",
            "label": label,
            "engine": engine,
            "workload": workload,
            "prompts_per_s": rate,
        }

    rows = [
        row("prefix", "prefix", "1instr", 400.0),
        row("prefix", "prefix", "5instr", 900.0),
        row("batched", "batched", "1instr", 0.0),
        row("official", "official", "1instr", 10.0),
    ]
    got = projection({r["name"]: r for r in rows})
    assert got["prompts"] == 24_000 and list(got["paths"]) == ["prefix"]
    assert (
        got["paths"]["prefix"]["projected_s"] == 60.0
        and got["paths"]["prefix"]["row"] == "prefix_1instr_bfloat16"
    )
    [line] = projection_lines(got)
    assert "24,000 SummEval prompts at 400.0 prompts/s" in line and line.endswith(
        ": 60 s; the compute floor on one H200: 46-58 s"
    )
    tok = AutoTokenizer.from_pretrained(save_llama3_tokenizer(tmp_path))
    assert [tok(t, add_special_tokens=False).input_ids for t in ("A", " A", "B", " B")] == [
        [32],
        [362],
        [33],
        [426],
    ]
    assert tok.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False).startswith(
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>"
    )


def test_the_vllm_path_benchmark_is_left_out_where_hydra_is_absent(tmp_path):
    """`harness-bench vllm-path` runs the shipped config, so it needs Hydra: on the bare machine the
    other subcommands still load, and it is not offered (control: test_vllm_run runs it here)."""
    r = _run(_command(["vllm-path", "--help"]), tmp_path)
    assert r.returncode == 2 and "invalid choice: 'vllm-path'" in r.stderr, r.stderr[-2000:]
