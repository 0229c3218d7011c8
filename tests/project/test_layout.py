"""The package's shape: imports run one way, no cycles, no hidden function-local imports.

The layers (STYLE.md): base records and I/O -> data, models, prompts, http -> judges -> judging ->
metrics -> (zepo | abb | report: the page modules) -> runtime (with the commands that read finished
runs: harness-collect, harness-report, harness-compare, a sweep's index) -> (experiments | bench) ->
the `harness.run` command. A module may import its own layer or a lower one; zepo and abb never
import each other; no two of harness's subpackages import each other, at any module. Function-local
imports are kept for heavy libraries only (a config error must come back before torch or vLLM
has been imported); a function-local harness import would hide a cycle, so none is allowed.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "harness"

LAYERS = {
    "harness": 0,
    "harness.errors": 0,
    "harness.checks": 0,
    "harness.records": 0,
    "harness.results": 0,
    "harness.files": 0,
    "harness.redaction": 0,
    "harness.progress": 0,
    "harness.figures": 0,
    "harness.data": 1,
    "harness.models": 1,
    "harness.prompts": 1,
    "harness.api_client": 1,
    "harness.judges": 2,
    "harness.judging": 3,
    "harness.metrics": 4,
    "harness.zepo": 5,
    "harness.abb": 5,
    "harness.report": 5,
    "harness.runtime": 6,
    "harness.experiments": 7,
    "harness.bench": 7,
    "harness.run": 8,
}
SIBLINGS = {("harness.zepo", "harness.abb"), ("harness.abb", "harness.zepo")}
HEAVY = {
    "vllm",
    "openai",
    "matplotlib",
    "wandb",
    "torch",
    "transformers",
    "tokenizers",
    "safetensors",
    "scipy",
    "submitit",
    "hydra_plugins",
    "gguf",
    "mistral_common",
    "tiktoken",
    "llama_models",
    "omegaconf",
}
"""Libraries a function may import locally: each costs seconds to import or is an optional extra
(omegaconf: absent on the GPU machine, where `harness-bench gpu` imports HFJudge -> models/resolve.py;
submitit and hydra_plugins: the `slurm` extra)."""


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def resolve(base: str, name: str | None) -> str:
    """`from base import name`: the submodule when `name` is one, else `base`."""
    if name:
        cand = ROOT.parent / Path(*f"{base}.{name}".split("."))
        if cand.with_suffix(".py").is_file() or (cand / "__init__.py").is_file():
            return f"{base}.{name}"
    return base


def imports(path: Path) -> list[tuple[str, bool, int]]:
    """(imported module, function-local?, line) for every import in the file."""
    tree = ast.parse(path.read_text())
    out = []

    def visit(node: ast.AST, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = local or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import):
                out.extend((a.name, local, child.lineno) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                out.extend((resolve(child.module, a.name), local, child.lineno) for a in child.names)
            visit(child, inner)

    visit(tree, False)
    return out


def layer_of(module: str) -> tuple[str, int]:
    best = max((k for k in LAYERS if module == k or module.startswith(k + ".")), key=len)
    return best, LAYERS[best]


@pytest.fixture(scope="module")
def graph() -> dict[str, list[tuple[str, bool, int]]]:
    return {module_name(p): imports(p) for p in sorted(ROOT.rglob("*.py"))}


def test_every_module_has_a_layer(graph):
    for mod in graph:
        assert layer_of(mod), mod


def test_imports_run_one_way(graph):
    bad = []
    for mod, deps in graph.items():
        src_key, src = layer_of(mod)
        for dep, _, line in deps:
            if not dep.startswith("harness"):
                continue
            dst_key, dst = layer_of(dep)
            if dst > src or (src_key, dst_key) in SIBLINGS:
                bad.append(f"{mod}:{line} imports {dep} (layer {dst_key} above/beside {src_key})")
    assert not bad, "\n".join(bad)


def test_no_function_local_imports_but_heavy_libraries(graph):
    bad = [
        f"{mod}:{line} imports {dep} inside a function"
        for mod, deps in graph.items()
        for dep, local, line in deps
        if local and dep.split(".")[0] not in HEAVY
    ]
    assert not bad, "\n".join(bad)


def test_no_import_cycles(graph):
    edges = {m: {d for d, _, _ in deps if d in graph and d != m} for m, deps in graph.items()}
    cycles = _strongly_connected(edges)
    assert not cycles, cycles


def _strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm; components of more than one module are cycles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in edges:
        if v not in index:
            connect(v)
    return found


def package_of(module: str) -> str:
    """The subpackage a module belongs to (`harness.report.page` -> `harness.report`); a module
    directly under harness/ (`harness.files`) is its own."""
    return ".".join(module.split(".")[:2])


def package_problems(graph: dict[str, list[tuple[str, bool, int]]]) -> list[str]:
    """Imports that break the one-way edge between harness's subpackages: a module of report/
    importing runtime/ (report holds the page modules; the commands that import runtime live in
    runtime/), and every cycle among the packages, even one that no two modules close."""
    bad = [
        f"{mod}:{line} (report/) imports {dep} (runtime/)"
        for mod, deps in graph.items()
        if package_of(mod) == "harness.report"
        for dep, _, line in deps
        if package_of(dep) == "harness.runtime"
    ]
    packages = {package_of(m) for m in graph}
    edges = {p: set() for p in packages}
    for mod, deps in graph.items():
        edges[package_of(mod)] |= {package_of(d) for d, _, _ in deps} & packages - {package_of(mod)}
    bad.extend(f"package cycle: {' <-> '.join(c)}" for c in _strongly_connected(edges))
    return bad


def test_no_package_imports_back_report_below_runtime(graph):
    assert not package_problems(graph)
    assert any(d.startswith("harness.report.page") for d, _, _ in graph["harness.runtime.context"])
    assert any(d.startswith("harness.runtime") for d, _, _ in graph["harness.runtime.report_cli"])


def test_the_package_check_catches_a_report_module_importing_runtime():
    """Negative control: the old shape, report/cli.py importing runtime while runtime/context.py
    imports report/page.py, is reported twice: the back edge and the package cycle; a cycle between
    two other packages that no module-level cycle shows is reported too."""
    graph = {
        "harness.report.page": [("harness.files", False, 2)],
        "harness.report.cli": [("harness.runtime.context", False, 9), ("harness.report.page", False, 3)],
        "harness.runtime.context": [("harness.report.page", False, 8)],
        "harness.files": [],
    }
    assert package_problems(graph) == [
        "harness.report.cli:9 (report/) imports harness.runtime.context (runtime/)",
        "package cycle: harness.report <-> harness.runtime",
    ]
    graph = {
        "harness.data.a": [("harness.models.b", False, 1)],
        "harness.models.c": [("harness.data.d", False, 1)],
        "harness.models.b": [],
        "harness.data.d": [],
    }
    assert package_problems(graph) == ["package cycle: harness.data <-> harness.models"]
    assert not _strongly_connected({m: {d for d, _, _ in deps} for m, deps in graph.items()})


def test_the_page_shows_the_chat_wrapping_without_a_judge():
    """report/prompt.py reads the tokenizer through the chat layer; it builds no judge (an hf judge
    for a vLLM run's page was the old way)."""
    deps = imports(ROOT / "report" / "prompt.py")
    assert not [d for d, _, _ in deps if d.startswith(BACKENDS)]


def test_the_checks_catch_a_violation(tmp_path, monkeypatch):
    """Negative control: an upward import, a cycle and a hidden local import are all reported."""
    edges = {"a": {"b"}, "b": {"a"}, "c": set()}
    assert _strongly_connected(edges) == [["a", "b"]]
    bad = tmp_path / "bad.py"
    bad.write_text("import json\n\ndef f():\n    import os\n    from harness.experiments import judge\n")
    found = imports(bad)
    assert ("os", True, 4) in found and ("json", False, 1) in found
    assert any(d.startswith("harness.experiments") and local for d, local, _ in found)
    assert layer_of("harness.experiments.judge")[1] > layer_of("harness.metrics.summary")[1]


BACKENDS = ("harness.judges.hf", "harness.judges.vllm", "harness.judges.api")
"""The judge backends: each builds on the shared layers (base, answers, chat), never on another."""


def backend_imports(path: Path, backend: str) -> list[str]:
    """The other backends that `backend`'s module (at `path`) imports, at the top or in a function."""
    return sorted(
        {
            d
            for d, _, _ in imports(path)
            for b in BACKENDS
            if b != backend and (d == b or d.startswith(b + "."))
        }
    )


def test_no_backend_imports_another():
    """vllm.py shares the chat formatting, encoding, context checks and identity with hf.py through
    harness.judges.chat, not by importing hf.py (which holds the transformers judge)."""
    bad = {b: backend_imports(ROOT / "judges" / f"{b.rsplit('.', 1)[1]}.py", b) for b in BACKENDS}
    assert not any(bad.values()), bad


def test_the_backend_check_catches_vllm_importing_hf(tmp_path):
    """Negative control: the old vllm.py's imports from hf.py (ChatPrompts, format_chat, ...) are reported."""
    bad = tmp_path / "vllm.py"
    bad.write_text(
        "from harness.judges.chat import context_length\n"
        "from harness.judges.hf import (\n    ChatPrompts,\n    format_chat,\n)\n"
    )
    assert backend_imports(bad, "harness.judges.vllm") == ["harness.judges.hf"]
    assert backend_imports(bad, "harness.judges.hf") == []  # its own module is not another backend


MAX_LINES = 600
"""The most lines a module in harness/ may have (STYLE.md: one job per file), counted as `ruff format`
lays the code out (tests/project/test_ruff.py keeps it so): no cap met by folding lines."""


def long_modules(root: Path, most: int = MAX_LINES) -> dict[str, int]:
    """Modules under `root` with more than `most` lines, with their line counts."""
    counts = {
        str(p.relative_to(root.parent)): len(p.read_text().splitlines()) for p in sorted(root.rglob("*.py"))
    }
    return {name: n for name, n in counts.items() if n > most}


def test_no_module_is_over_the_line_cap():
    assert not long_modules(ROOT), f"split these modules: {long_modules(ROOT)}"


def test_the_length_check_catches_a_long_module(tmp_path):
    """Negative control: a module one line over the cap is reported, one at the cap is not."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (pkg / "fits.py").write_text("x = 1\n" * MAX_LINES)
    assert long_modules(pkg) == {"pkg/long.py": MAX_LINES + 1}


def script_edges(folder: Path) -> dict[str, set[str]]:
    """Which of `folder`'s scripts each script imports, at the top or inside a function (a script
    imports another by its file name: `from bench_common import stats`)."""
    names = {p.stem for p in folder.glob("*.py")}
    return {
        p.stem: {d.split(".")[0] for d, _, _ in imports(p)} & names - {p.stem}
        for p in sorted(folder.glob("*.py"))
    }


ALIAS = re.compile(r"^from harness[\w.]* import main$", re.MULTILINE)
"""The line of a script that only re-exports an installed command's `main`."""


def script_problems(folder: Path) -> list[str]:
    """Scripts that reach into tests/ (a path put on sys.path, or a test module imported) or that only
    re-export an installed command (the console scripts are what docs name)."""
    tests = {p.stem for p in (ROOT.parent / "tests").rglob("*.py") if p.parent.name != "helpers"}
    found = []
    for path in sorted(folder.glob("*.py")):
        text = path.read_text()
        mods = {m.split(".")[0] for m, _, _ in imports(path)}
        if '"tests"' in text or "'tests'" in text or mods & tests:
            found.append(f"{path.name}: imports from tests/")
        code = [line for line in text.splitlines() if line.strip() and not line.startswith(("#", '"""'))]
        if ALIAS.search(text) and len(code) <= 8:
            found.append(f"{path.name}: only re-exports an installed command")
    return found


def test_scripts_import_nothing_from_tests_and_hold_no_alias():
    assert not script_problems(ROOT.parent / "scripts")


def test_the_script_check_catches_a_test_import_and_an_alias(tmp_path):
    """Negative control: the old abb_counterexample.py's path to tests/ and scripts/report.py's shape."""
    (tmp_path / "uses_tests.py").write_text(
        'import sys\nsys.path[:0] = [str(REPO / "tests")]\n\ndef f():\n    import abb_scenarios\n'
    )
    (tmp_path / "report.py").write_text(
        '"""python scripts/report.py RUN_DIR: the same as harness-report."""\n\nimport sys\n\n'
        'from harness.report.cli import main\n\nif __name__ == "__main__":\n    sys.exit(main())\n'
    )
    (tmp_path / "fine.py").write_text("from harness.abb import scenarios\n\nprint(scenarios)\n")
    assert script_problems(tmp_path) == [
        "report.py: only re-exports an installed command",
        "uses_tests.py: imports from tests/",
    ]
    assert issue_references(tmp_path) == []
    (tmp_path / "fine.py").write_text("# Round 2 (issue #20): findings\n")
    assert issue_references(tmp_path) == ["fine.py:1"]


def test_scripts_have_no_import_cycles():
    """scripts/ too: a script imports another by its file name, never in a circle."""
    edges = script_edges(ROOT.parent / "scripts")
    assert edges and not _strongly_connected(edges), _strongly_connected(edges)


def test_the_script_check_catches_a_cycle(tmp_path):
    """Negative control: the old shape, a function-local import closing a circle, is reported."""
    (tmp_path / "bench_judge.py").write_text("from bench_dtypes import merge\n")
    (tmp_path / "bench_dtypes.py").write_text("def merge():\n    from bench_judge import compare\n")
    (tmp_path / "bench_run.py").write_text("import json\nfrom bench_dtypes import merge\n")
    edges = script_edges(tmp_path)
    assert edges["bench_run"] == {"bench_dtypes"}
    assert _strongly_connected(edges) == [["bench_dtypes", "bench_judge"]]


def imports_of_test_modules(folder: Path) -> list[str]:
    """Where a file under `folder` (tests/helpers/ too) imports a test module or conftest, at the top
    or in a function: `from test_zepo import x`, `import conftest`, `from tests.conftest import y`,
    `from tests import test_run`. What two test modules share lives in tests/helpers/ (`helpers`)."""
    out = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                names = [f"{base}.{a.name}".strip(".") for a in node.names]
            else:
                continue
            for name in names:
                if any(part == "conftest" or part.startswith("test_") for part in name.split(".")):
                    out.append(f"{path.relative_to(folder).as_posix()}:{node.lineno} imports {name}")
    return out


def test_no_test_imports_another_test_module_or_conftest():
    bad = imports_of_test_modules(ROOT.parent / "tests")
    assert not bad, "move what they share to tests/helpers/: " + "; ".join(bad)


def test_the_test_import_check_catches_one(tmp_path):
    """Negative control: every way of importing a test module or conftest is reported; helpers are not."""
    (tmp_path / "helpers").mkdir()
    (tmp_path / "helpers" / "cli.py").write_text("import os\n")
    (tmp_path / "test_a.py").write_text(
        "import pytest\nfrom helpers.cli import run_in_process\nfrom test_zepo import scripted_docs\n"
        "import test_run as tr\n\ndef f():\n    from conftest import REPO\n"
    )
    (tmp_path / "test_b.py").write_text("from tests.conftest import compose\nfrom tests import test_sweep\n")
    (tmp_path / "helpers" / "data.py").write_text("from test_cli_errors import GOOD\n")
    assert imports_of_test_modules(tmp_path) == [
        "helpers/data.py:1 imports test_cli_errors.GOOD",
        "test_a.py:3 imports test_zepo.scripted_docs",
        "test_a.py:4 imports test_run",
        "test_a.py:7 imports conftest.REPO",
        "test_b.py:1 imports tests.conftest.compose",
        "test_b.py:2 imports tests.test_sweep",
    ]


def stdlib_shadows(root: Path) -> list[str]:
    """Files or folders whose module name is a standard-library module's (`secrets.py`, `http/`):
    run as a script (`python harness/run.py`, as `wandb agent` does) such a file shadows the real one."""
    out = []
    for path in sorted(root.rglob("*")):
        if "__pycache__" in path.parts or not (path.suffix == ".py" or path.is_dir()):
            continue
        name = path.stem if path.suffix == ".py" else path.name
        if name in sys.stdlib_module_names:
            out.append(str(path.relative_to(root.parent)))
    return out


def test_no_module_shadows_the_standard_library():
    top = ROOT.parent
    bad = [p for d in ("harness", "scripts", "tests") for p in stdlib_shadows(top / d)]
    assert not bad, f"rename these (they shadow the standard library): {bad}"


def test_the_shadow_check_catches_one(tmp_path):
    """Negative control: a `secrets.py` and an `http/` folder are found."""
    pkg = tmp_path / "pkg"
    (pkg / "http").mkdir(parents=True)
    (pkg / "secrets.py").write_text("")
    (pkg / "fine.py").write_text("")
    assert stdlib_shadows(pkg) == ["pkg/http", "pkg/secrets.py"]


ISSUE_REFERENCE = re.compile(r"\bissue #?\d+|\bstop \d+\b|\(#\d+\)|\bround \d+ of #\d+", re.IGNORECASE)
"""How an issue or stop number is written; they belong in docs and logs, never in code or config."""


def issue_references(root: Path) -> list[str]:
    return [
        f"{p.relative_to(root)}:{i}"
        for p in sorted(root.rglob("*"))
        if p.suffix in (".py", ".yaml")
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if ISSUE_REFERENCE.search(line)
    ]


def test_no_issue_numbers_in_code_or_config_and_the_benchmarks_doc_is_short():
    """What the house keeps: no issue or stop numbers in harness/, conf/ or scripts/ (control: the
    pattern finds a written one), and docs/benchmarks.md in at most 200 lines, opening with its
    current result."""
    for folder in (ROOT, ROOT.parent / "conf", ROOT.parent / "scripts"):
        assert not issue_references(folder), (folder, issue_references(folder))
    assert ISSUE_REFERENCE.search("see issue #48") and ISSUE_REFERENCE.search("(stop 41)")
    doc = (ROOT.parent / "docs" / "benchmarks.md").read_text().splitlines()
    assert len(doc) <= 200 and any(line.startswith("**Current result") for line in doc[:5])


BUILTIN_MARKS = {"parametrize", "skipif", "skip", "xfail", "usefixtures", "filterwarnings", "xdist_group"}


def marker_mismatch(declared: set[str], tests: Path) -> tuple[set[str], set[str]]:
    """(declared in pyproject but used by no test, used by a test but not declared)."""
    used = {
        m
        for p in tests.rglob("*.py")
        for m in re.findall(r"pytest\.mark\.(\w+)", p.read_text())
        if m not in BUILTIN_MARKS
    }
    return declared - used, used - declared


def declared_markers() -> set[str]:
    import tomllib

    config = tomllib.loads((ROOT.parent / "pyproject.toml").read_text())
    return {m.split(":")[0] for m in config["tool"]["pytest"]["ini_options"]["markers"]}


def test_every_marker_is_declared_and_used():
    """pyproject's markers are the ones tests use (a declared `gpu` marker no test carried was
    dropped); control: a declared, unused marker and an undeclared, used one are both found."""
    assert marker_mismatch(declared_markers(), ROOT.parent / "tests") == (set(), set())
    assert marker_mismatch({"slow", "gpu"}, ROOT.parent / "tests") == ({"gpu"}, {"slurm", "vllm"})
