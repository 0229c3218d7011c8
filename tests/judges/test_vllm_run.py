"""The path a backend=vllm run takes, counted from outside the judge: the engine is handed every
request of the run at once (vLLM's LLMEngine watched by harness.bench.vllm_path.EngineWatch), each
prompt is tokenized once (the tokenizer's calls counted, for backend=hf too), a SIGKILLed run
resumes without judging anything twice, backend.engine_args are checked against vLLM's (they reach
its scheduler: tests/judges/test_vllm_tiny.py), and the benchmark of this path against vLLM alone reports
its fields.

The SmolLM2 runs share the session's engine (conftest `vllm_judge`); no other engine starts here
(stopping one in this process would break the session's: vLLM's parallel state is global)."""

from __future__ import annotations

import collections
import json
import os
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers.cli import assert_one_line_error, cache_rows, killed_after_commits, run_in_process
from helpers.engines import P_A_BOUND

from harness.bench.vllm_path import EngineWatch
from harness.judging import load_judgments

pytestmark = pytest.mark.vllm

SMOLLM2_RUN = [
    "experiment=judge",
    "backend=vllm",
    "model=smollm2",
    "task=summeval",
    "task.offset=85",
    "task.max_candidates=4",
    "experiment.shuffles=10",
    "wandb.mode=disabled",
    "progress=false",
]
"""Documents 85-86 (two short articles), 4 candidates: 12 ordered pairs per document + the content-free prompt."""


@pytest.fixture(scope="module")
def tiny_llama3() -> Path:
    from harness.models.tiny import ensure_tiny_model

    return ensure_tiny_model("llama3")


def count_tokenized(mp: pytest.MonkeyPatch) -> list[str]:
    """Every text a tokenizer is called on in this process from now on (transformers' __call__,
    batched or not)."""
    from transformers import PreTrainedTokenizerBase

    texts: list[str] = []
    real = PreTrainedTokenizerBase.__call__

    def counted(self, text=None, *args, **kwargs):
        texts.extend([text] if isinstance(text, str) else list(text or []))
        return real(self, text, *args, **kwargs)

    mp.setattr(PreTrainedTokenizerBase, "__call__", counted)
    return texts


def _prompt_counts(texts: list[str]) -> collections.Counter:
    """How often each chat-formatted judge prompt was tokenized (answer labels and the like are short)."""
    return collections.Counter(t for t in texts if len(t) > 300)


def record_ticks(mp: pytest.MonkeyPatch, engine) -> list[tuple[int, int]]:
    """(requests, vLLM's unfinished requests then) for each tick of the run's progress bar from now on."""
    import harness.judging

    ticks: list[tuple[int, int]] = []
    real = harness.judging.tqdm.update

    def update(bar, n=1):
        ticks.append((n, engine.get_num_unfinished_requests()))
        return real(bar, n)

    mp.setattr(harness.judging.tqdm, "update", update)
    return ticks


def descents(rows: list[list[int]]) -> int:
    """Places where a row of token ids sorts before the one added just before it."""
    return sum(a > b for a, b in zip(rows, rows[1:]))


TOTAL = 2 * 12 + 1
"""SMOLLM2_RUN's requests: more than cache.chunk's 16, the most a chunked judge call held."""


@pytest.fixture(scope="module")
def unbroken(vllm_judge, tmp_path_factory):
    """SMOLLM2_RUN on a fresh cache, on the session's engine, watched from outside the judge: the
    engine (EngineWatch), the scheduler (requests per step), the tokenizer (prompt counts) and the
    progress bar (its ticks)."""
    from vllm.v1.core.sched.scheduler import Scheduler

    tmp = tmp_path_factory.mktemp("unbroken")
    vllm_judge.llm.reset_prefix_cache()  # as a fresh engine: warm from earlier tests, one step finishes all
    scheduled: list[int] = []
    schedule = Scheduler.schedule

    def counted(scheduler, *args, **kwargs):
        out = schedule(scheduler, *args, **kwargs)
        scheduled.append(len(out.num_scheduled_tokens))
        return out

    with pytest.MonkeyPatch.context() as mp, EngineWatch().watching() as seen:
        texts = count_tokenized(mp)
        ticks = record_ticks(mp, vllm_judge.llm.llm_engine)
        mp.setattr(Scheduler, "schedule", counted)
        r = run_in_process([*SMOLLM2_RUN, f"hydra.run.dir={tmp / 'run'}"], tmp)
    assert r.returncode == 0, r.stderr[-3000:]
    return SimpleNamespace(
        out=tmp / "run",
        seen=seen,
        scheduled=scheduled,
        counts=_prompt_counts(texts),
        ticks=ticks,
        results=json.loads((tmp / "run" / "results.json").read_text()),
    )


@pytest.mark.slow
def test_a_vllm_run_hands_the_engine_every_request_at_once(unbroken, vllm_judge, tmp_path, monkeypatch):
    """A backend=vllm judge run: the engine holds every request unfinished before its first step
    (>= 90% required), sorted so prompts sharing a prefix sit together, and its progress bar
    ticks as requests finish, while others are still in the engine. Negative control: the same run
    fed one cache chunk (16) at a time, as before the judge streamed, never holds more than the chunk."""
    from harness.judges.vllm import VLLMJudge

    assert unbroken.results["judge_calls"] == len(unbroken.seen.added) == TOTAL
    assert unbroken.seen.most_in_flight >= 0.9 * TOTAL, unbroken.seen.most_in_flight
    # test_vllm_tiny's test_engine_args_reach_the_scheduler's control: no limit of 4 by default
    assert max(unbroken.scheduled) > 4
    assert sum(n for n, _ in unbroken.ticks) == TOTAL and unbroken.ticks[0][1] > 0, unbroken.ticks
    # Added sorted by document, then token ids (prompts sharing a prefix side by side): a descent
    # only where one document's block meets the next (3: the content-free prompt is one). Control: shuffled.
    shuffled = list(unbroken.seen.added)
    random.Random(0).shuffle(shuffled)
    assert descents(unbroken.seen.added) <= 2 < descents(shuffled)

    monkeypatch.setattr(VLLMJudge, "streaming", property(lambda self: False))
    with EngineWatch().watching() as chunked:  # the same prompts: the engine's prefix cache makes it quick
        ticks = record_ticks(monkeypatch, vllm_judge.llm.llm_engine)
        r = run_in_process([*SMOLLM2_RUN, f"hydra.run.dir={tmp_path / 'chunked'}"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(chunked.added) == TOTAL and chunked.most_in_flight == 16 < 0.9 * TOTAL
    assert sum(n for n, _ in ticks) == TOTAL


@pytest.mark.slow
def test_each_prompt_is_tokenized_once_in_a_vllm_run(unbroken):
    """The request checks, the engine and the run's work report read one tokenization of each
    prompt (the transformers run's test below has the negative control)."""
    assert len(unbroken.counts) == TOTAL and set(unbroken.counts.values()) == {1}, (
        unbroken.counts.most_common(2)
    )


def test_each_prompt_is_tokenized_once_in_a_transformers_run(tmp_path, tiny_llama, monkeypatch):
    """backend=hf: the request checks, the model and the run's work report read one tokenization of
    each prompt. Negative control: with no token ids kept (chat.KEPT_IDS = 0) each prompt is
    tokenized again by each of them, and the count shows it."""
    import harness.judges.kept_ids as kept_ids

    tokenized = count_tokenized(monkeypatch)
    args = [
        "experiment=judge",
        "backend=hf",
        "model=tiny_llama",
        "task=summeval",
        "task.offset=85",
        "task.docs=1",
        "task.max_candidates=3",
        "experiment.shuffles=10",
        "wandb.mode=disabled",
        "progress=false",
    ]
    r = run_in_process([*args, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path / "a")
    assert r.returncode == 0, r.stderr[-3000:]
    counts = _prompt_counts(tokenized)
    assert len(counts) == 6 + 1 and set(counts.values()) == {1}, counts.most_common(2)

    tokenized.clear()
    monkeypatch.setattr(kept_ids, "KEPT_IDS", 0)
    r = run_in_process([*args, f"hydra.run.dir={tmp_path / 'again'}"], tmp_path / "b")
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(_prompt_counts(tokenized)) == 7 and min(_prompt_counts(tokenized).values()) >= 3


@pytest.mark.slow
def test_a_killed_vllm_run_resumes_judging_nothing_twice(tmp_path, unbroken):
    """`python -m harness.run ... backend=vllm` SIGKILLed once some requests are committed; the
    rerun hands the engine only the rest (counted on the engine), and its results equal the
    unbroken run's: the same pairs, every decision, P(A) within the float32 bound (vLLM's batches
    change the float order, so not bit for bit: docs/slurm.md)."""
    _, done_before = killed_after_commits([*SMOLLM2_RUN, f"hydra.run.dir={tmp_path / 'a'}"], tmp_path, 1)
    assert 0 < done_before < TOTAL, "the kill did not land half-way"

    with EngineWatch().watching() as resumed_engine:
        r = run_in_process([*SMOLLM2_RUN, f"hydra.run.dir={tmp_path / 'b'}"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    resumed = json.loads((tmp_path / "b" / "results.json").read_text())
    assert len(resumed_engine.added) == resumed["judge_calls"] == TOTAL - done_before  # nothing judged twice
    assert cache_rows(tmp_path / "cache" / "requests.sqlite") == TOTAL

    a, cf_a = load_judgments(tmp_path / "b" / "judgments.jsonl")
    b, cf_b = load_judgments(unbroken.out / "judgments.jsonl")
    assert [(j.doc_id, j.a_id, j.b_id) for j in a] == [(j.doc_id, j.a_id, j.b_id) for j in b]
    worst = max([abs(x.p_a - y.p_a) for x, y in zip(a, b)] + [abs(cf_a - cf_b)])
    print(
        f"\nresumed after {done_before} of {TOTAL} committed: max |dP(A)| against the unbroken run {worst:.1e}"
    )
    assert worst < P_A_BOUND["float32"] and all((x.p_a > 0.5) == (y.p_a > 0.5) for x, y in zip(a, b))


def test_an_unknown_engine_arg_is_one_line_naming_the_nearest(tmp_path):
    out = tmp_path / "run"
    for bad, needles in (
        ("max_num_seq", ("backend.engine_args.max_num_seq", "nearest: max_num_seqs")),
        ("dtype", ("backend.engine_args.dtype", "set backend.dtype=... instead")),
    ):
        r = run_in_process(
            [
                "experiment=judge",
                "backend=vllm",
                "model=tiny_llama3",
                f"backend.engine_args.{bad}=4",
                f"hydra.run.dir={out}",
                "wandb.mode=disabled",
            ],
            tmp_path,
        )
        assert_one_line_error(r, *needles)
        assert not (out / "config.json").exists()  # refused with the config, before any work


def test_engine_args_are_checked_when_a_judge_is_built_in_code(tiny_llama3):
    from harness.errors import ConfigError
    from harness.judges.settings import VLLMSettings
    from harness.judges.vllm import VLLMJudge

    with pytest.raises(ConfigError, match="nearest: max_num_seqs"):
        VLLMJudge(tiny_llama3, backend=VLLMSettings(engine_args={"max_num_seq": 4}))
    judge = VLLMJudge(tiny_llama3, backend=VLLMSettings(engine_args={"max_num_seqs": 4}))
    assert not judge.loaded and '"max_num_seqs": 4' in judge.engine_key  # passed on, no engine started
    # An argument that may change the numbers joins the identity (its rows are not served to a run
    # without it); a scheduling one does not (a resubmission with fewer sequences keeps the cache).
    plain, kv = (
        VLLMJudge(tiny_llama3),
        VLLMJudge(tiny_llama3, backend=VLLMSettings(engine_args={"kv_cache_dtype": "auto"})),
    )
    assert judge.identity == plain.identity and plain.identity.startswith("vllm|")
    assert (
        kv.identity.startswith("vllm+args=")
        and kv.identity.split("|", 1)[1] == plain.identity.split("|", 1)[1]
    )
    with pytest.raises(ConfigError, match="engine_args.logprobs_mode is set by the harness itself"):
        VLLMJudge(tiny_llama3, backend=VLLMSettings(engine_args={"logprobs_mode": "processed_logits"}))


@pytest.mark.slow
def test_the_vllm_path_benchmark_reports_its_fields(vllm_judge, capsys, tmp_path):
    """`harness-bench vllm-path`, small, on the session's engine (the command's own entry, in this
    process): the JSON line's fields, not the speed (this machine is shared)."""
    from harness.bench.cli import main

    out = tmp_path / "vllm-path.json"
    assert (
        main(
            [
                "vllm-path",
                "--docs",
                "1",
                "--candidates",
                "2",
                "--rounds",
                "1",
                "--warmup",
                "0",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out.strip().splitlines()
    result = json.loads(printed[-1])
    assert json.loads(out.read_text()) == result
    assert (
        result["requests"] == [3] and result["harness_in_flight"] == [3] and result["vllm_in_flight"] == [3]
    )
    assert result["ratio"] > 0 and len(result["harness_s"]) == len(result["vllm_s"]) == 1
    assert result["engine"] == vllm_judge.engine_settings and result["threads"] == vllm_judge.threads
    assert (
        result["machine"]["cpu"]
        and result["machine"]["date"]
        and result["command"].startswith("harness-bench vllm-path --docs 1")
    )
    assert printed[-2].startswith("harness / vLLM alone: ") and "in flight at most 3" in printed[-2]


def test_the_vllm_path_benchmark_refuses_a_bad_override_in_one_line(tmp_path):
    """A config override the shipped conf refuses is one line and exit 2, before any engine starts."""
    from helpers.cli import run_bench

    r = run_bench(
        ["vllm-path", "--model", "tiny_llama3", "--override", "backend.engine_args.max_num_seq=4"], tmp_path
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert (
        r.stderr.strip()
        .splitlines()[-1]
        .startswith("error: backend.engine_args.max_num_seq is not an engine argument")
    ), r.stderr[-2000:]


def test_the_engine_start_settings_per_platform():
    """On a GPU vLLM sizes its workers' threads (a job's OMP_NUM_THREADS is not passed on) and
    spawns its processes unless the user chose a start method; on a CPU the engine runs in this
    process on one torch thread per core but one, the environment otherwise as it was. The GPU
    side's effect (worker thread counts, a spawned engine core) shows only on a GPU."""
    from harness.judges.vllm_engine import engine_environment, engine_threads

    job = {"OMP_NUM_THREADS": "8"}
    assert engine_environment(False, False, job) == {
        "OMP_NUM_THREADS": None,
        "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
    }
    chosen = {**job, "VLLM_WORKER_MULTIPROC_METHOD": "fork"}
    assert engine_environment(False, False, chosen) == {"OMP_NUM_THREADS": None}
    assert engine_environment(True, True, job) == {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    assert engine_environment(True, False, job) == {}
    assert engine_threads(True, True, None, 16) == 15 and engine_threads(True, True, 3, 16) == 3
    assert engine_threads(False, True, 3, 16) is None and engine_threads(True, False, None, 16) is None


def test_an_engine_starts_under_its_environment_and_puts_it_back(monkeypatch):
    """`started` builds vLLM's LLM with the platform's environment applied and leaves this process's
    as it was, whatever the engine set. The LLM here records what it finds (vLLM's GPU start runs
    only on a GPU; the CPU one is every other vLLM test)."""
    from harness.judges.vllm_engine import engine_environment, started

    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD", raising=False)
    before = dict(os.environ)
    found: dict[str, str] = {}

    class LLM:  # what vllm.LLM sees of the environment when it starts its processes
        def __init__(self, **kwargs):
            found.update(os.environ)
            os.environ["HARNESS_TEST_SET_BY_ENGINE"] = "1"

    started(SimpleNamespace(LLM=LLM), {"model": "m"}, None, engine_environment(False, False, os.environ))
    assert "OMP_NUM_THREADS" not in found and found["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
    assert dict(os.environ) == before


class ScriptedEngine:
    """LLMEngine's request API as stream_outputs uses it, each request finishing after its own number
    of steps (`steps_of(token ids)`) with `reason`: what a GPU's scheduler does to requests of
    different lengths, which a CPU engine on short prompts cannot show (every one ends in the step
    that schedules it). Records the requests unfinished before each step."""

    def __init__(self, steps_of, reason="length"):
        self.steps_of, self.reason = steps_of, reason
        self.left: dict[str, int] = {}
        self.in_flight: list[tuple[int, int]] = []  # (unfinished, finished before) at each step
        self.finished = 0
        self.aborted: list[str] = []

    def add_request(self, request_id, prompt, params):
        self.left[request_id] = self.steps_of(prompt["prompt_token_ids"])

    def step(self):
        self.in_flight.append((len(self.left), self.finished))
        done = []
        for rid in list(self.left):
            self.left[rid] -= 1
            if self.left[rid] == 0:
                del self.left[rid]
                self.finished += 1
                done.append(
                    SimpleNamespace(
                        request_id=rid, finished=True, outputs=[SimpleNamespace(finish_reason=self.reason)]
                    )
                )
        return done

    def has_unfinished_requests(self):
        return bool(self.left)

    def abort_request(self, ids):
        self.aborted.extend(ids)
        for rid in ids:
            self.left.pop(rid, None)


def test_the_stream_keeps_its_window_full_and_refuses_a_request_that_did_not_finish():
    """stream_outputs with a window of 4 over 12 requests of 1 to 3 steps each: every request comes
    back once, and before every step the engine holds 4 (or all that are left): each finished one is
    replaced at once, so a long request never leaves the scheduler waiting on a drain. Negative
    control: the same requests fed 4 per call, each call drained before the next (the judge's
    windows before), leave the engine short while requests remain. A request the engine ends other
    than by its length or a stop (an abort, an engine error) raises, and the rest are aborted."""
    from harness.errors import JudgeOutputError
    from harness.judges.vllm_engine import stream_outputs

    rows = [(k, [k, 1 + k % 3]) for k in range(12)]
    engine = ScriptedEngine(lambda ids: ids[1])
    got = [key for done in stream_outputs(engine, rows, None, None, window=4) for key, _ in done]
    assert sorted(got) == list(range(12)) and len(got) == 12
    assert all(held == min(4, 12 - finished) for held, finished in engine.in_flight), engine.in_flight

    drained = ScriptedEngine(lambda ids: ids[1])
    for at in range(0, 12, 4):
        for _ in stream_outputs(drained, rows[at : at + 4], None, None):
            pass
    assert any(held < min(4, 12 - finished) for held, finished in drained.in_flight), drained.in_flight
    assert len(drained.in_flight) > len(engine.in_flight)

    broken = ScriptedEngine(lambda ids: ids[1], reason="abort")
    with pytest.raises(JudgeOutputError, match="ended a judge request with 'abort'"):
        for _ in stream_outputs(broken, rows, None, None, window=4):
            pass
    assert broken.aborted and not broken.left


def test_the_engine_starts_while_the_prompts_are_tokenized(
    tiny_llama3, coherence_pairs, tmp_path, monkeypatch
):
    """The request cache's misses are checked (tokenized) in a thread while the engine starts in
    this one: the engine's start begins before the last prompt is tokenized, so on a GPU its
    minutes of start-up and the run's tokenizing overlap; the kept ids then feed the stream without
    tokenizing again. The engine is scripted (its start a 0.3 s sleep: no engine starts here) and
    each tokenizing call slowed by 0.3 s. Control: with the overlap taken away (the plain check),
    the check starts no engine and the engine starts only after the last prompt is tokenized."""
    import threading
    import time

    import harness.judges.chat as chat
    import harness.judges.vllm as vllm_judge
    from harness.judges.base import check_requests
    from harness.judges.cache import CachedJudge, ScoreCache
    from harness.judges.vllm import VLLMJudge
    from harness.judges.wrappers import PreemptibleJudge

    events: list[tuple[str, float, str]] = []
    real = chat.encode_chat

    def slow_encode(tokenizer, texts, *args, **kwargs):
        time.sleep(0.3)
        out = real(tokenizer, texts, *args, **kwargs)
        events.append(("tokenized", time.perf_counter(), threading.current_thread().name))
        return out

    class ScriptedLLM:
        llm_engine = ScriptedEngine(lambda ids: 1)
        model_config = SimpleNamespace(max_model_len=8192)

    def start(*args, **kwargs):
        events.append(("engine start", time.perf_counter(), threading.current_thread().name))
        time.sleep(0.3)
        return ScriptedLLM()

    monkeypatch.setattr(chat, "encode_chat", slow_encode)
    monkeypatch.setattr(vllm_judge, "_start_engine", start)

    def checked(tag: str):
        events.clear()
        judge = VLLMJudge(tiny_llama3)
        check_requests(
            PreemptibleJudge(CachedJudge(judge, ScoreCache(tmp_path / f"{tag}.sqlite"))), coherence_pairs
        )
        return judge, dict((name, (at, thread)) for name, at, thread in events)

    judge, seen = checked("overlap")
    assert judge.loaded and seen["engine start"][0] < seen["tokenized"][0]
    assert seen["tokenized"][1] != seen["engine start"][1] == threading.main_thread().name
    assert all(judge.kept_length(r.prompt) for r in coherence_pairs)  # the stream reads them back

    monkeypatch.delattr(VLLMJudge, "check_before_computing")
    judge, seen = checked("control")
    assert not judge.loaded and "engine start" not in seen
    judge.llm  # noqa: B018 - what the stream does next
    assert events[-1][0] == "engine start" and events[-1][1] > seen["tokenized"][0]
