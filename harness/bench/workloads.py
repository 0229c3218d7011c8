"""What the benchmarks judge: real SummEval prompts, as the harness renders them.

- `pair_workload`: every ordered pair of the first documents' first candidates, under one or
  more instructions, pair-major (one pair's prompts under every instruction sit together, as a
  ZEPO epoch orders them). `WORKLOADS` names the two the speed table uses.
- `run_requests`: what `experiment=judge` asks of its judge (the pairs and the content-free prompt).
- `epoch_jobs`: one ZEPO epoch's (documents, instruction) jobs.
- `instant_judgments`: a judged set at any size without a model (seeded), for the metrics' cost.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from harness.data import default_data_dir, load_task
from harness.data.fetch import cli_mirror, ensure_data
from harness.judging import build_requests, content_free_request
from harness.prompts import default_instruction, load_zepo_instructions
from harness.records import Document, Judgment, PairRequest

DEFAULT_MODEL = "smollm2"
"""The benchmarks' model: a conf/model name or a model spec (harness.models.resolve.model_folder)."""
WORKLOADS = {"1instr": 1, "5instr": 5}
"""The speed table's workloads: the same pairs under the first 1 or all 5 of `instructions`."""
ZEPO_ASPECTS = ("coherence", "fluency", "consistency", "relevance")


def data_dir(given: Path | None, *tasks: str) -> Path:
    """--data-dir as it is, else the data folder a run reads, `tasks`' files and ZEPO's fetched into
    it first as a run fetches them (from $HARNESS_DATA_MIRROR, else GitHub; verified)."""
    if given is not None:
        return given
    ensure_data(default_data_dir(), mirror=cli_mirror(None), only=[*tasks, "zepo"])
    return default_data_dir()


def documents(folder: Path | None, docs: int, candidates: int) -> list[Document]:
    """The first `docs` SummEval documents with their first `candidates` candidates each."""
    return [
        Document(d.id, d.source, d.candidates[:candidates], d.context)
        for d in load_task("summeval", data_dir=data_dir(folder, "summeval"), limit=docs)
    ]


def instructions(folder: Path | None) -> list[str]:
    """ZEPO's official SummEval instructions (its 4 aspects), then our own coherence wording."""
    zepo = load_zepo_instructions(data_dir(folder) / "zepo" / "init_prompts.json")
    return [zepo[a] for a in ZEPO_ASPECTS] + [default_instruction("coherence", "summarization")]


def pair_workload(docs: list[Document], instrs: list[str]) -> list[PairRequest]:
    """Every ordered pair of every document under each instruction in turn (pair-major)."""
    per_instruction = [build_requests(docs, ins, "summarization", None)[0] for ins in instrs]
    return [reqs[k] for k in range(len(per_instruction[0])) for reqs in per_instruction]


def workloads(
    folder: Path | None, docs: int, candidates: int, names: list[str]
) -> dict[str, list[PairRequest]]:
    """The named `WORKLOADS` on the same documents."""
    found, instrs = documents(folder, docs, candidates), instructions(folder)
    return {name: pair_workload(found, instrs[: WORKLOADS[name]]) for name in names}


def run_requests(folder: Path | None, docs: int, candidates: int) -> list[PairRequest]:
    """An `experiment=judge` run's requests: SummEval coherence pairs, then the content-free prompt."""
    ins = default_instruction("coherence", "summarization")
    found = load_task("summeval", data_dir=data_dir(folder, "summeval"), limit=docs)
    reqs = build_requests(found, ins, "summarization", "coherence", candidates)[0]
    return [*reqs, content_free_request(ins, "summarization")]


def epoch_jobs(folder: Path | None, n_instructions: int) -> list[tuple[list[Document], str]]:
    """One ZEPO epoch: the first SummEval document under each of the first `n_instructions`."""
    docs = load_task("summeval", data_dir=data_dir(folder, "summeval"), limit=1)
    return [(docs, text) for text in instructions(folder)[:n_instructions]]


def instant_judgments(docs: int, candidates: int, seed: int = 0) -> list[Judgment]:
    """Every ordered pair of `docs` documents, judged instantly: a position bias per document plus
    a weak preference for the candidate humans rate higher (1-5 in thirds, with ties), plus noise."""
    rng = np.random.default_rng(seed)
    out = []
    for d in range(docs):
        human = rng.integers(3, 16, candidates) / 3
        bias = rng.normal(0.5, 1.0)
        for i in range(candidates):
            for k in range(candidates):
                if i == k:
                    continue
                z = bias + 0.5 * (human[i] - human[k]) + rng.normal()
                la, lb = -math.log1p(math.exp(-z)) - 0.4, -math.log1p(math.exp(z)) - 0.4
                out.append(
                    Judgment(
                        f"doc{d}",
                        f"M{i}",
                        f"M{k}",
                        1 / (1 + math.exp(-z)),
                        {"A": la, "A: A": la - 3, "B": lb, "B: B": lb - 3},
                        float(human[i]),
                        float(human[k]),
                    )
                )
    return out
