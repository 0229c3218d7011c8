"""The ZEPO / A-BB optimizer gets the judge's protections through the judges' chat layer
(harness.judges.chat): its identity holds the weights' fingerprint (the completion cache's key and
ZEPO's resume check), its meta-prompt keeps control-token strings as text, and a meta-prompt that
cannot fit the model's positions with its reply is one line. Each against the shipped CLI or the
shipped builders (conf/optimizer/local.yaml through RunContext), with its negative control."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers import SHARED_DATA
from helpers.cli import assert_one_line_error, run_in_process
from helpers.compose import compose
from helpers.data import INJECTED
from helpers.models import perturbed_copy

pytestmark = pytest.mark.usefixtures("one_thread")

ZEPO = [
    "experiment=zepo",
    "model=tiny_llama",
    "optimizer.meta_prompt=zepo",
    "optimizer.max_new_tokens=8",
    "experiment.population=2",
    "experiment.epochs=1",
    "task=summeval",
    "task.docs=2",
    "task.max_candidates=3",
    "experiment.search_docs=1",
    "experiment.shuffles=5",
    "experiment.heldout_spearman=false",
    "wandb.mode=disabled",
    "progress=false",
]
"""A ZEPO run of one paraphrase on the tiny model; the official meta-prompt takes the (random
model's) reply verbatim, so every sample is a candidate."""


def _zepo(tmp_path, out, cache, *extra):
    return run_in_process([*ZEPO, f"hydra.run.dir={out}", f"cache.path={cache}", *extra], tmp_path)


def _paraphrase(out):
    rows = [json.loads(x) for x in (out / "history.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and rows[1]["parent"] == 0
    return rows[0]["text"], rows[1]["text"], rows[1]["seed"]


def _fresh(path, instruction, seed):
    """What the optimizer model at `path` writes for this slot, with no cache."""
    from harness.zepo.optimizers import LocalOptimizer

    opt = LocalOptimizer(path, device="cpu", meta_prompt="zepo", max_new_tokens=8, max_attempts=4)
    return opt.paraphrase(instruction, 1, seed, "coherence")[0]


@pytest.mark.slow
def test_other_optimizer_weights_are_asked_and_refused_on_resume(tiny_llama, tmp_path):
    """Two fine-tunes saved as exp1/final and exp2/final (one folder name, other weights). On one
    request cache, the second run's paraphrase is its own model's (it was the first model's, served
    from the completion cache: `local|final|...` keyed both); resuming the first run with the second
    optimizer is refused in one line (it was accepted: state.json's optimizer hash was the same)."""
    one = perturbed_copy(tiny_llama, tmp_path / "exp1" / "final")
    two = tmp_path / "exp2" / "final"
    perturbed_copy(one, two)  # the same folder name and size, other values
    cache = tmp_path / "cache" / "requests.sqlite"
    r = _zepo(tmp_path, tmp_path / "run1", cache, f"optimizer.path={one}")
    assert r.returncode == 0, r.stderr[-2000:]
    initial, first, seed = _paraphrase(tmp_path / "run1")
    r = _zepo(tmp_path, tmp_path / "run2", cache, f"optimizer.path={two}")
    assert r.returncode == 0, r.stderr[-2000:]
    again, second, seed2 = _paraphrase(tmp_path / "run2")
    assert (again, seed2) == (initial, seed)
    assert first == _fresh(one, initial, seed) and second == _fresh(two, initial, seed)
    assert second != first  # the two models write different replies for this seed
    results = [json.loads((tmp_path / d / "results.json").read_text())["optimizer"] for d in ("run1", "run2")]
    assert results[0].split("|w=")[1] != results[1].split("|w=")[1]

    r = _zepo(tmp_path, tmp_path / "run1", cache, f"optimizer.path={two}")
    assert_one_line_error(r, "state.json", "different optimizer")


def test_an_optimizer_past_its_positions_is_one_line(tiny_llama, tmp_path):
    """optimizer.path at a model of 64 positions: the ~290-token meta-prompt is refused before any
    sample (was: exit 0, samples past position 64 the weights never saw)."""
    short = tmp_path / "short-llama"
    shutil.copytree(tiny_llama, short)
    config = json.loads((short / "config.json").read_text())
    config["max_position_embeddings"] = 64
    (short / "config.json").write_text(json.dumps(config))
    out = tmp_path / "run"
    r = _zepo(tmp_path, out, tmp_path / "cache" / "requests.sqlite", f"optimizer.path={short}")
    assert_one_line_error(
        r, "optimizer's meta-prompt", "plus 8 to generate", "context of 64", "optimizer.max_new_tokens"
    )
    assert not (out / "history.jsonl").exists()


def test_the_reply_counts_against_the_optimizers_context(tiny_judge, shared_data):
    """The check holds the reply's tokens too: a meta-prompt that fits alone is refused when the
    reply would run past the positions (control: a reply that fits is sampled)."""
    from harness.errors import JudgeInputError
    from harness.prompts import load_zepo_instructions
    from harness.zepo.optimizers import LocalOptimizer

    instruction = load_zepo_instructions(shared_data / "zepo" / "init_prompts.json")["coherence"]
    opt = LocalOptimizer(
        "tiny-llama",
        model=tiny_judge.model,
        tokenizer=tiny_judge.tokenizer,
        device="cpu",
        max_new_tokens=4,
        meta_prompt="zepo",
    )
    messages = opt.messages(instruction, "coherence")
    n = len(opt.prompt_ids(messages))
    opt.max_length = n + 5
    assert len(opt.complete(messages, [1])) == 1  # n + 4 new tokens fit n + 5 positions
    opt.max_tokens = 5
    with pytest.raises(
        JudgeInputError, match=f"is {n} tokens plus 5 to generate, longer than the model's context of {n + 5}"
    ):
        opt.complete(messages, [1])


def _optimizer(tmp_path, *overrides):
    from harness.runtime.context import RunContext

    cfg = compose(
        [
            "experiment=zepo",
            "model=tiny_llama",
            f"data.mirror={SHARED_DATA}",
            f"cache.path={tmp_path / 'cache' / 'requests.sqlite'}",
            "wandb.mode=disabled",
            *overrides,
        ]
    )
    ctx = RunContext(cfg, tmp_path / "ctx")
    return ctx, ctx.optimizer()


def test_control_tokens_in_the_instruction_stay_text_for_the_optimizer(tmp_path):
    """An instruction holding `<|im_end|>\\n<|im_start|>assistant ...` reaches the shipped optimizer's
    model as text: its prompt ids are the ones written by hand from the template (4 control tokens);
    negative control: the old encoding (the templated text tokenized whole) holds 8."""
    from harness.judges.chat import format_chat_messages

    _, opt = _optimizer(tmp_path)
    tok = opt.tokenizer
    messages = opt.messages(f"Judge which summary is more coherent. {INJECTED}", "coherence")

    def text_ids(s):
        return tok(s, add_special_tokens=False, split_special_tokens=True)["input_ids"]

    im_start, im_end = tok.convert_tokens_to_ids("<|im_start|>"), tok.convert_tokens_to_ids("<|im_end|>")
    oracle = [
        tok.bos_token_id,
        im_start,
        *text_ids("user\n" + messages[0]["content"]),
        im_end,
        *text_ids("\n"),
        im_start,
        *text_ids("assistant\n"),
    ]
    special = {int(i) for i in tok.added_tokens_decoder}
    assert opt.prompt_ids(messages) == oracle and sum(i in special for i in oracle) == 4
    old = tok(format_chat_messages(tok, messages), add_special_tokens=False)["input_ids"]
    assert sum(i in special for i in old) == 8


def test_optimizer_and_judge_of_one_model_share_the_weights_identity(tiny_llama, tmp_path):
    """The shipped optimizer on the judge's weights keys its completions with the judge's model
    identity (weights part included); on other weights at optimizer.path, with those weights'
    fingerprint, which equals a judge's of the same folder; and its completion cache does not serve
    one model's samples to another (A-BB's llm_paraphrase asks through `generate`)."""
    from harness.judges.base import innermost
    from harness.judges.hf import HFJudge

    ctx, shared = _optimizer(tmp_path)
    judge = innermost(ctx.judge)
    weights = judge.identity.split("|w=")[1]
    assert shared.identity.split("|w=")[1].split("|")[0] == weights == judge.model_identity.split("|w=")[1]
    assert shared.identity.startswith(judge.model_identity + "|t=")

    tuned = perturbed_copy(tiny_llama, tmp_path / "exp2" / "tiny-llama-v2")
    _, other = _optimizer(tmp_path, f"optimizer.path={tuned}")
    own = HFJudge(tuned, device="cpu").identity.split("|w=")[1]
    assert other.identity.split("|w=")[1].split("|")[0] == own != weights
    # The same completion cache (cache.path's completions.sqlite), one request, two models.
    messages = [{"role": "user", "content": "Rewrite: the cat sat on the mat."}]
    mine = shared.generate(messages, 7, [0, 1])
    theirs = other.generate(messages, 7, [0, 1])
    assert other.calls == 2 and theirs != mine
    assert other.cache.path == shared.cache.path
