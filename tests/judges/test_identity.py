"""A judge's identity is what determines its numbers (issue #28), and a cached run loads no model (#33).

- The identity holds a content fingerprint of the weights (harness.models.fingerprint), so a model
  folder whose weights changed under the same name gets other cache keys: real model calls and that
  model's numbers. A copied, unchanged folder keeps its identity (its cached answers stay valid).
- Rows keyed the old way (no weights part) are not served: asked again, with one line saying why.
- The transformers judge loads its weights on the first request the cache lacks: a fully cached run
  makes 0 weight loads (results.json's judge_work.weight_loads).
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
from helpers import SHARED_DATA
from helpers.compose import compose
from helpers.models import OldKeyed, perturbed_copy

pytestmark = pytest.mark.usefixtures("one_thread")


def test_changed_weights_under_the_same_name_are_judged_again(
    tiny_llama, tiny_judge, coherence_pairs, tmp_path
):
    """A fine-tune under its base model's name: other keys, real model calls, its own numbers. An
    unchanged copy keeps the identity. Negative control: with the old identity (no weights part) the
    cache serves the first model's rows to the changed one, with no model call."""
    from harness.judges.cache import CachedJudge, ScoreCache
    from harness.judges.hf import HFJudge

    reqs = coherence_pairs[:6]
    changed = HFJudge(perturbed_copy(tiny_llama, tmp_path / "tiny-llama-v2"), device="cpu", batch_size=4)
    copied = HFJudge(shutil.copytree(tiny_llama, tmp_path / "copy" / "tiny-llama-v2"), device="cpu")
    assert copied.identity == tiny_judge.identity  # a copy is the same judge
    assert changed.identity != tiny_judge.identity and not changed.loaded
    assert changed.legacy_identity == tiny_judge.legacy_identity  # what the old key saw: the name only

    cache = ScoreCache(tmp_path / "requests.sqlite")
    first = CachedJudge(tiny_judge, cache).score_pairs(reqs)
    again = CachedJudge(changed, cache)
    scores = again.score_pairs(reqs)
    assert again.calls == len(reqs) and changed.weight_loads == 1
    assert [s.p_a for s in scores] == [s.p_a for s in changed.score_pairs(reqs)]  # its own numbers
    assert max(abs(a.p_a - b.p_a) for a, b in zip(first, scores)) > 1e-3

    # Negative control: keyed the old way, the changed model is served the first model's answers.
    old = ScoreCache(tmp_path / "old.sqlite")
    CachedJudge(OldKeyed(tiny_judge), old).score_pairs(reqs)
    served = CachedJudge(OldKeyed(changed), old)
    assert [s.p_a for s in served.score_pairs(reqs)] == [s.p_a for s in first] and served.calls == 0


def test_rows_keyed_without_weights_are_asked_again_with_one_line(
    tiny_judge, coherence_pairs, tmp_path, caplog
):
    """A cache an older harness filled (keys without the weights) is not served: every request goes
    to the model, and one warning says why; a cache without such rows says nothing."""
    from harness.judges.cache import CachedJudge, ScoreCache

    reqs = coherence_pairs[:4]
    cache = ScoreCache(tmp_path / "requests.sqlite")
    CachedJudge(OldKeyed(tiny_judge), cache).score_pairs(reqs)  # as an older harness keyed them
    judge = CachedJudge(tiny_judge, cache)
    with caplog.at_level(logging.WARNING, logger="harness.judges.cache"):
        judge.score_pairs(reqs[:2])
        judge.score_pairs(reqs)
    lines = [r.getMessage() for r in caplog.records if "keyed without the judge's weights" in r.getMessage()]
    assert judge.calls == len(reqs) and len(lines) == 1 and "4 cached rows" in lines[0]

    caplog.clear()
    fresh = CachedJudge(tiny_judge, ScoreCache(tmp_path / "fresh.sqlite"))
    with caplog.at_level(logging.WARNING, logger="harness.judges.cache"):
        fresh.score_pairs(reqs)
    assert not [r for r in caplog.records if "keyed without" in r.getMessage()]


def test_fingerprint_reads_headers_and_samples_once(tiny_llama, tmp_path, monkeypatch):
    """The fingerprint is kept per (path, size, mtime): a second look reads no file."""
    import harness.models.fingerprint as fp

    monkeypatch.setenv("HARNESS_MODEL_CACHE", str(tmp_path / "models"))
    monkeypatch.setattr(fp, "_memo", None)
    folder = shutil.copytree(tiny_llama, tmp_path / "m")
    first = fp.weights_fingerprint(folder)
    assert (tmp_path / "models" / "fingerprints.json").is_file()
    monkeypatch.setattr(fp, "_memo", None)
    monkeypatch.setattr(fp, "_read_parts", lambda *a: pytest.fail("a stored digest was read again"))
    assert fp.weights_fingerprint(folder) == first
    with pytest.raises(Exception, match="holds no weights"):
        (folder / "model.safetensors").unlink()
        fp.weights_fingerprint(folder)


def _judge_run(tmp_path: Path, name: str, *extra: str, wandb: str = "disabled") -> tuple[dict, int]:
    """One in-process `experiment=judge` run on the tiny model, as a fresh process runs it (no judge
    kept from an earlier run): its results.json and the weight loads it made, wherever they happened
    (harness.judges.weights.WEIGHT_LOADS: building the judge included)."""
    import harness.judges.weights as weights
    import harness.runtime.context as context
    from harness.runtime.entry import run

    context._LOADED.clear()
    cfg = compose(
        [
            "experiment=judge",
            "model=tiny_llama",
            "task.docs=1",
            "task.max_candidates=3",
            "backend.threads=1",
            "experiment.shuffles=5",
            f"wandb.mode={wandb}",
            "progress=false",
            f"data.dir={tmp_path / 'data'}",
            f"data.mirror={SHARED_DATA}",
            f"cache.path={tmp_path / 'cache' / 'requests.sqlite'}",
            *extra,
        ]
    )
    before = sum(weights.WEIGHT_LOADS.values())
    run(cfg, tmp_path / name)
    return json.loads((tmp_path / name / "results.json").read_text()), sum(
        weights.WEIGHT_LOADS.values()
    ) - before


def _p_a(results_dir: Path) -> list[float]:
    from harness.judging import load_judgments

    return [j.p_a for j in load_judgments(results_dir / "judgments.jsonl")[0]]


def test_a_fully_cached_run_loads_no_weights(shared_data, tiny_llama, tmp_path, monkeypatch):
    """First run (W&B offline): 1 weight load, 7 model calls (6 ordered pairs + the content-free
    prompt), the judge identity in W&B's config (checked failing with RunContext._record_judge
    emptied, by hand: the fingerprint is in no other part of the run's config). The same
    run again: 0 loads, 0 calls, the same numbers. The same name on changed weights
    (model.path=<copy>): 1 load, 7 calls, other numbers. Negative control: an eager judge (weights
    loaded when built, as before #33) counts 1 load on the cached run."""
    import harness.judges.hf as hf

    first, loads = _judge_run(tmp_path, "first", wandb="offline")
    assert loads == first["judge_work"]["weight_loads"] == 1 and first["judge_calls"] == 7
    # W&B's config holds the identity (its weights fingerprint is nowhere in the composed config)
    (run_file,) = (tmp_path / "first" / "wandb").glob("offline-run-*/run-*.wandb")
    assert first["judge"].encode() in run_file.read_bytes() and "|w=" in first["judge"]
    assert first["judge"].split("|w=")[1] not in (tmp_path / "first" / "config.json").read_text()
    cached, loads = _judge_run(tmp_path, "cached")
    assert loads == cached["judge_work"]["weight_loads"] == 0 and cached["judge_calls"] == 0
    assert _p_a(tmp_path / "cached") == _p_a(tmp_path / "first")

    other = perturbed_copy(tiny_llama, tmp_path / "finetune" / "tiny-llama-v2")
    tuned, loads = _judge_run(tmp_path, "tuned", f"model.path={other}")
    assert loads == 1 and tuned["judge_calls"] == 7
    assert tuned["judge"] != first["judge"] and tuned["judge"].split("|")[1] == first["judge"].split("|")[1]
    assert max(abs(a - b) for a, b in zip(_p_a(tmp_path / "tuned"), _p_a(tmp_path / "first"))) > 1e-3

    class Eager(hf.HFJudge):  # the defect put back: weights loaded when the judge is built
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            _ = self.model

    monkeypatch.setattr(hf, "HFJudge", Eager)
    eager, loads = _judge_run(tmp_path, "eager")
    assert eager["judge_calls"] == 0 and loads == 1  # the count catches it


def test_api_identity_names_the_served_weights(tiny_judge, caplog):
    """The API judge's identity holds the model the server lists (/v1/models: id and vLLM's `root`,
    its weights): the same URL and name serving other weights is another judge. A name the server
    does not list is `served=unreported`, with one warning."""
    from helpers.servers import OpenAIServer

    from harness.judges.api import ApiJudge

    with OpenAIServer(judge=tiny_judge, root="/models/base") as srv:
        base = ApiJudge("tiny-test", srv.url, logprob_mode="top", api_key_env=None).identity
        srv.root = "/models/finetune"  # restarted on other weights under the same name
        tuned = ApiJudge("tiny-test", srv.url, logprob_mode="top", api_key_env=None)
        assert base.endswith("|served=tiny-test@/models/base") and tuned.identity != base
        assert tuned.legacy_identity == base.rsplit("|served=", 1)[0]  # the old key could not tell them apart
        with caplog.at_level(logging.WARNING, logger="harness.judges.api"):
            other = ApiJudge("not-served", srv.url, logprob_mode="top", api_key_env=None).identity
    assert other.endswith("|served=unreported")
    assert len([r for r in caplog.records if "does not list model 'not-served'" in r.getMessage()]) == 1


def test_an_edit_between_the_samples_of_a_small_model_is_a_new_judge(tiny_llama, tmp_path):
    """+inf written into an embedding row of a prompt token, in bytes no 4 KiB sample covers: the
    sampled fingerprint was the base model's, so on a cache the base had filled the broken model
    was served the base's P(A) (rc 0, 0 calls). Weight files up to fingerprint.WHOLE are now hashed
    whole: the edited copy is its own judge, asked, and refused as broken (one line, exit 2).
    Control: an untouched copy is the same judge, served from the cache (0 calls)."""
    import math
    import struct

    from helpers.cli import assert_one_line_error, run_in_process
    from transformers import AutoTokenizer

    from harness.models.fingerprint import SAMPLE
    from harness.prompts import default_instruction

    edited = shutil.copytree(tiny_llama, tmp_path / "edited" / "tiny-llama-v2")
    f = edited / "model.safetensors"
    data = bytearray(f.read_bytes())
    n = struct.unpack("<Q", data[:8])[0]
    entry = json.loads(data[8 : 8 + n])["model.embed_tokens.weight"]
    begin, end = (8 + n + o for o in entry["data_offsets"])
    row, mid = (end - begin) // entry["shape"][0], (begin + end) // 2
    sampled = [(begin, begin + SAMPLE), (mid - SAMPLE // 2, mid + SAMPLE // 2), (end - SAMPLE, end)]
    ids = AutoTokenizer.from_pretrained(edited)(default_instruction("coherence", "summarization"))[
        "input_ids"
    ]
    t = next(
        i for i in ids if all(begin + (i + 1) * row <= lo or hi <= begin + i * row for lo, hi in sampled)
    )
    data[begin + t * row : begin + (t + 1) * row] = struct.pack("<f", math.inf) * (row // 4)
    f.write_bytes(bytes(data))

    args = [
        "experiment=judge",
        "model=tiny_llama",
        "task.docs=1",
        "task.max_candidates=2",
        "wandb.mode=disabled",
        "progress=false",
        "metrics.bootstrap=0",
        f"cache.path={tmp_path / 'requests.sqlite'}",
    ]
    base = run_in_process([*args, f"hydra.run.dir={tmp_path / 'base'}"], tmp_path)
    assert base.returncode == 0, base.stderr[-2000:]
    broken = run_in_process([*args, f"model.path={edited}", f"hydra.run.dir={tmp_path / 'broken'}"], tmp_path)
    assert_one_line_error(broken, "gave no usable answer")
    assert not (tmp_path / "broken" / "results.json").exists()
    copy = shutil.copytree(tiny_llama, tmp_path / "copy" / "tiny-llama-v2")
    same = run_in_process([*args, f"model.path={copy}", f"hydra.run.dir={tmp_path / 'same'}"], tmp_path)
    assert (
        same.returncode == 0
        and json.loads((tmp_path / "same" / "results.json").read_text())["judge_calls"] == 0
    )
