"""SCRIPTED stand-ins for the ZEPO tests (known behaviour, no model): a position-biased judge, an
optimizer and the loopback server's optimizer replies, the documents they judge, the searches built
on them, a spy on a real judge, and the overrides of the ZEPO run end to end on the tiny Llama."""

from __future__ import annotations

import math
import re
from pathlib import Path

from harness.judges.cache import CachedJudge, ScoreCache
from harness.records import Candidate, Document, PairScore
from harness.zepo import search as zepo

PHRASES = (
    "Which {n} candidate shows better {w}? Reply 'A' if candidate A is better and 'B' if candidate B is better. "
    "Return the letter only.",
    "Judge the {w} of both {n} candidates. If candidate A has better {w}, return 'A'; if candidate B does, "
    "return 'B'. Only the letter.",
    "Consider {w}. Compare candidate A with candidate B and answer 'A' when A is better or 'B' when B is better, "
    "nothing else.",
    "Assess {w} in the two {n} candidates. Output A if candidate A is better and B if candidate B is better. "
    "Give only the choice.",
    "Read both {n} candidates and decide which has stronger {w}: answer 'A' for candidate A or 'B' for "
    "candidate B only.",
)


GARBAGE = ("Sure! Here are some options:\n1. Rate the texts.\n2. Pick one.", "I cannot help with that.")


def scripted_completion(body: dict) -> str:
    """The loopback server's optimizer replies: a function of the request's seed (so runs are
    reproducible whatever the fault order), garbage for half the seeds."""
    seed = int(body.get("seed", 0))
    content = body["messages"][-1]["content"]
    word = re.search(r'(?:keep the word|change the keyword) "([^"]+)"', content).group(1)  # ours | official
    noun = "summary" if "summary" in content.lower() else "response"
    if seed % 4 < 2:
        return GARBAGE[seed % 4]
    return PHRASES[seed % len(PHRASES)].format(w=word, n=noun) + f" (variant {seed % 97})"


class ScriptedBiasJudge:
    """SCRIPTED judge with a designed bias: P(A) = sigmoid(quality gap + bias(instruction)), where the
    bias is read from a '(variant N)' marker in the instruction, so each instruction's A-rate is
    known by design. It stands in for a model only in the selection-logic tests."""

    identity = "scripted-bias-judge|v1"

    def __init__(self) -> None:
        self.calls = 0

    @staticmethod
    def bias(prompt: str) -> float:
        m = re.search(r"\(variant (\d+)\)", prompt)
        return 3.0 if m is None else (int(m.group(1)) % 13 - 6) / 2.0

    def score_pairs(self, requests):
        out = []
        for r in requests:
            self.calls += 1
            qa, qb = (
                float(re.search(rf"candidate {x}: q(\d+)", r.prompt).group(1))
                if f"candidate {x}: q" in r.prompt
                else 0.0
                for x in "AB"
            )
            z = (qa - qb) * 0.4 + self.bias(r.prompt)
            out.append(
                PairScore(
                    {"A:A": -math.log1p(math.exp(-z)), "B:B": -math.log1p(math.exp(z))},
                    1 / (1 + math.exp(-z)),
                )
            )
        return out


class ScriptedOptimizer:
    """SCRIPTED optimizer: returns PHRASES by seed (a stand-in for the LLM in selection tests)."""

    identity = "scripted-optimizer"

    def __init__(self) -> None:
        self.calls = 0

    def paraphrase(self, instruction, n, seed, aspect, avoid=()):
        self.calls += 1
        return [PHRASES[seed % len(PHRASES)].format(w=aspect, n="summary") + f" (variant {seed % 97})"]


def scripted_docs(n: int = 3) -> list[Document]:
    return [
        Document(
            f"d{k}",
            f"source {k}",
            tuple(Candidate(f"c{i}", f"q{i}", {"coherence": float(i)}) for i in range(4)),
        )
        for k in range(n)
    ]


INITIAL = "Which summary is more coherent? Answer 'A' or 'B'."
"""The instruction a scripted search starts from."""


def scripted_search(
    tmp_path,
    *,
    docs=None,
    initial=INITIAL,
    judge_cls=ScriptedBiasJudge,
    opt_cls=ScriptedOptimizer,
    epochs=1,
    **kw,
):
    """A ZEPO search by the scripted judge (behind a request cache) and optimizer: the first document
    searched, the others held out, its state in tmp_path/state.json."""
    docs = docs if docs is not None else scripted_docs()
    judge = CachedJudge(judge_cls(), ScoreCache(tmp_path / "c.sqlite"))
    settings = zepo.SearchSettings(**{"population": 3, "epochs": epochs, "shuffles": 5, **kw})
    return zepo.Search(
        judge,
        opt_cls(),
        initial,
        "coherence",
        "summarization",
        docs[:1],
        docs[1:],
        settings,
        state_path=tmp_path / "state.json",
    )


class CallLog:
    """Records the size of every call reaching the wrapped judge (a spy; the judge is real)."""

    def __init__(self, judge):
        self.judge, self.identity, self.sizes = judge, judge.identity, []

    def score_pairs(self, requests):
        self.sizes.append(len(requests))
        return self.judge.score_pairs(requests)


def e2e_overrides(tmp: Path, url: str, data: Path, *extra: str) -> list[str]:
    """The ZEPO run end to end on a tiny slice: the tiny Llama judge, the API optimizer at `url` (the
    loopback server), data and cache under `tmp`."""
    return [
        "experiment=zepo",
        "model=tiny_llama",
        "optimizer=api",
        f"optimizer.base_url={url}",
        "optimizer.model=scripted-loopback",
        "optimizer.timeout_s=1",
        "optimizer.max_retries=6",
        "optimizer.backoff_base_s=0.01",
        "optimizer.backoff_max_s=0.05",
        "task=usr_zepo",
        "task.aspect=overall",
        "task.offset=27",
        "task.docs=2",
        "task.max_candidates=3",
        "experiment.search_docs=1",
        "experiment.population=3",
        "experiment.epochs=2",
        "experiment.shuffles=5",
        f"data.dir={tmp / 'data'}",
        f"data.mirror={data}",
        f"cache.path={tmp / 'cache' / 'requests.sqlite'}",
        "progress=false",
        "wandb.mode=disabled",
        *extra,
    ]
