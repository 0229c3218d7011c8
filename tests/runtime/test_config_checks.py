"""Every config value is checked before any work (harness/runtime/schema.py, entry.check): a table
of bad values, each refused with one ConfigError line naming the key, and every shipped config
accepted (the negative control: the checks refuse nothing a user is meant to run).

In-process compose + check (milliseconds per case); tests/runtime/test_cli_errors.py runs the same kind of
table through the real CLI (exit 2, one `error:` line, no run directory written)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.compose import compose

from harness.errors import ConfigError
from harness.runtime.entry import check

CONF = Path(__file__).resolve().parents[2] / "conf"
EXPERIMENTS = sorted(
    p.relative_to(CONF / "experiment").with_suffix("").as_posix()
    for p in (CONF / "experiment").rglob("*.yaml")
)


# What a shipped config needs from the user before it can run (documented in the config's header).
REQUIRED = {"abb_zepo": ["experiment.instruction.path=outputs/zepo/run/best_instruction.txt"]}


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_shipped_config_passes_the_checks(experiment):
    check(compose([f"experiment={experiment}", *REQUIRED.get(experiment, [])]))


@pytest.mark.parametrize("experiment", sorted(REQUIRED))
def test_a_shipped_config_without_what_it_requires_is_refused_in_one_line(experiment):
    with pytest.raises(ConfigError) as err:
        check(compose([f"experiment={experiment}"]))
    assert "\n" not in str(err.value) and REQUIRED[experiment][0].split("=")[0] in str(err.value)


@pytest.mark.parametrize("experiment", ["judge", "zepo", "sensitivity", "abb"])
@pytest.mark.parametrize(
    "parts",
    [
        ["backend=vllm", "optimizer=api"],
        ["backend=api", "model=tiny_llama"],
        ["task=jsonl", "task.path=mine.jsonl", "task.aspect=anything"],
    ],
)
def test_every_shipped_part_passes_the_checks(experiment, parts):
    check(compose([f"experiment={experiment}", *parts]))


BAD = [
    # (overrides, what the one line must name)  -- slices and counts
    (["task.offset=-1"], "task.offset=-1"),
    (["task.docs=0"], "task.docs=0"),
    (["task.max_candidates=-1"], "task.max_candidates=-1"),
    (["task.max_candidates=1"], "task.max_candidates=1"),
    (["task.num_shards=2", "task.shard_index=2"], "task.shard_index=2"),
    (["experiment.shuffles=0"], "experiment.shuffles=0"),
    (["experiment=zepo", "experiment.population=0"], "experiment.population=0"),
    (["experiment=zepo", "experiment.epochs=-1"], "experiment.epochs=-1"),
    (["experiment=zepo", "experiment.search_docs=0"], "experiment.search_docs=0"),
    (["experiment=zepo", "experiment.eval_docs=0"], "experiment.eval_docs=0"),
    (
        ["experiment=zepo", "experiment.search_debias=permutation", "experiment.objective=fairness_prob"],
        "experiment.objective='fairness_prob'",
    ),
    (
        ["experiment=zepo", "+experiment.search_docs_by_task.summeval=0"],
        "experiment.search_docs_by_task.summeval=0",
    ),
    (["experiment=sensitivity", "experiment.paraphrases=-2"], "experiment.paraphrases=-2"),
    (["experiment=abb", "experiment.verify=-1"], "experiment.verify=-1"),
    (["experiment=abb", "experiment.estimate=0"], "experiment.estimate=0"),
    (["experiment=abb", "experiment.bootstrap=-5"], "experiment.bootstrap=-5"),
    (["experiment=abb", "experiment.jitter.samples=-1"], "experiment.jitter.samples=-1"),
    (["cache.chunk=0"], "cache.chunk=0"),
    # sampling and numeric ranges
    (["optimizer.temperature=-1"], "optimizer.temperature=-1"),
    (["optimizer.temperature=inf"], "optimizer.temperature=inf"),
    (["optimizer.top_p=0"], "optimizer.top_p=0"),
    (["optimizer.min_ratio=2"], "optimizer.min_ratio/max_ratio"),
    (["optimizer=api", "optimizer.max_retries=-1"], "optimizer.max_retries=-1"),
    (["optimizer=api", "optimizer.timeout_s=0"], "optimizer.timeout_s=0"),
    (["backend.batch_size=-1"], "backend.batch_size=-1"),
    (["backend.generate_batch_size=0"], "backend.generate_batch_size=0"),
    (["backend=vllm", "backend.gpu_memory_utilization=1.5"], "backend.gpu_memory_utilization=1.5"),
    (["backend=api", "backend.top_logprobs=50"], "backend.top_logprobs=50"),
    (["backend=api", "backend.backoff_base_s=-1"], "backend.backoff_base_s=-1"),
    (["backend=api", "backend.backoff_max_s=0"], "backend.backoff_max_s=0"),
    (["backend=api", "backend.timeout_s=nan"], "backend.timeout_s=nan"),
    (["backend=api", "+backend.token_ids={A: -1, B: 2}"], "backend.token_ids.A=-1"),
    (["model.max_length=1"], "model.max_length=1"),
    (["experiment=abb", "experiment.tau=0"], "experiment.tau=0"),
    (["experiment=abb", "experiment.delta=1"], "experiment.delta=1"),
    (["experiment=abb", "experiment.alpha=1.5"], "experiment.alpha=1.5"),
    (["experiment=abb", "experiment.alpha_fraction=0"], "experiment.alpha_fraction=0"),
    (["experiment=abb", "experiment.alpha_min=-0.1"], "experiment.alpha_min=-0.1"),
    (["experiment=abb", "experiment.sigma_fraction=2"], "experiment.sigma_fraction=2"),
    (["experiment=abb", "experiment.dp_epsilon=1"], "experiment.dp_epsilon=1"),
    (["experiment=abb", "experiment.delta_split.est=1.5"], "experiment.delta_split.est=1.5"),
    (["experiment=abb", "experiment.delta_split.noise=lots"], "experiment.delta_split.noise='lots'"),
    (["experiment=abb", "experiment.delta_split.noise=0.6", "experiment.delta_split.est=0.5"], "delta_split"),
    (["experiment=abb", "experiment.mu_value=nan"], "experiment.mu_value=nan"),
    (["experiment=abb", "experiment.scores=file", "experiment.file.scale=[10,1]"], "experiment.file"),
    # names
    (["task.name=nosuchtask"], "task.name='nosuchtask'"),
    (["task.aspect=brilliance"], "unknown aspect 'brilliance'"),
    (["task.family=poetry"], "task.family='poetry'"),
    (["task=jsonl"], "task.path=None"),
    (["backend.device=tpu"], "backend.device='tpu'"),
    (["backend.device=cudaX"], "backend.device='cudaX'"),
    (["backend.engine=fast"], "backend.engine='fast'"),
    (["backend.dtype=int4"], "backend.dtype='int4'"),
    (["model.dtype=fp8"], "model.dtype='fp8'"),
    (["model.labels=[A,A]"], "model.labels"),
    (["model.path=''"], "model.path=''"),
    (["backend=vllm", "backend.dtype=int4"], "backend.dtype='int4'"),
    (["backend=api", "backend.logprob_mode=guess"], "backend.logprob_mode='guess'"),
    (["backend=api", "backend.endpoint=responses"], "backend.endpoint='responses'"),
    (["backend=api", "backend.base_url=ftp://x"], "backend.base_url='ftp://x'"),
    (["optimizer.device=tpu"], "optimizer.device='tpu'"),
    (["optimizer.dtype=int4"], "optimizer.dtype='int4'"),
    (["optimizer=api", "optimizer.base_url=localhost:8000"], "optimizer.base_url='localhost:8000'"),
    (["experiment.instruction.source=guess"], "experiment.instruction.source='guess'"),
    (["experiment.instruction.source=text"], "experiment.instruction.text=None"),
    (["experiment=zepo", "experiment.objective=accuracy"], "experiment.objective='accuracy'"),
    (["experiment=zepo", "experiment.ranking=elo"], "experiment.ranking='elo'"),
    (["experiment=abb", "experiment.scores=likert"], "experiment.scores='likert'"),
    (["experiment=abb", "experiment.orders=three"], "experiment.orders='three'"),
    (["experiment=abb", "experiment.mode=pairs"], "experiment.mode='pairs'"),
    (["experiment=abb", "experiment.bound=chernoff"], "experiment.bound='chernoff'"),
    (["experiment=abb", "experiment.mu=median"], "experiment.mu='median'"),
    (["experiment=abb", "experiment.sigma_mode=lots"], "experiment.sigma_mode='lots'"),
    (["experiment=abb", "experiment.kinds=[emoji]"], "unknown neighbour kind 'emoji'"),
    (["experiment=abb", "experiment.fields=[title]"], "fields must be among"),
    (["experiment=abb", "experiment.instruction.source=file"], "experiment.instruction.path=None"),
    (["experiment=abb", "experiment.scores=file"], "experiment.file.path=None"),
    (["wandb.mode=sometimes"], "wandb.mode='sometimes'"),
]


@pytest.mark.parametrize("overrides, needle", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_value_is_one_line_before_any_work(overrides, needle):
    cfg = compose(["model=tiny_llama", *overrides])
    with pytest.raises(ConfigError) as e:
        check(cfg)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg, msg
