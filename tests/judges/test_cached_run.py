"""A fully cached run imports no torch (issue #33: a cached `experiment=judge` in seconds).

A run whose requests are all cached loads no weights (tests/judges/test_identity.py counts the loads);
here the rest of what it used to pay for: building the transformers judge imported torch and most
of transformers (AutoTokenizer and AutoConfig import the modeling code: about 6 CPU seconds, more
than the report card, W&B and the summary together). Now the tokenizer class AutoTokenizer picked
for a folder is remembered and reloaded (checked against what was recorded), the config is read as
its config.json, and `device: auto` is known without torch on a CPU-only torch build. Each is
checked against what transformers gives, with a negative control.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def memo(tmp_path, monkeypatch):
    """An empty model cache for the remembered tokenizer classes (and the fingerprints)."""
    import harness.judges.weights as weights
    import harness.models.fingerprint as fp

    monkeypatch.setenv("HARNESS_MODEL_CACHE", str(tmp_path / "models"))
    monkeypatch.setattr(weights, "_tokenizers", None)
    monkeypatch.setattr(fp, "_memo", None)
    return tmp_path / "models" / weights.TOKENIZER_CLASSES


def _auto_calls(monkeypatch) -> list[str]:
    """Count AutoTokenizer.from_pretrained calls (they still load the tokenizer)."""
    from transformers import AutoTokenizer

    calls: list[str] = []
    real = AutoTokenizer.from_pretrained.__func__

    def counted(cls, path, *args, **kwargs):
        calls.append(str(path))
        return real(cls, path, *args, **kwargs)

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", classmethod(counted))
    return calls


def _same_tokenizer(a, b) -> None:
    messages = [{"role": "user", "content": "Which summary is better? <s> [INST] A or B"}]
    text = a.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert type(a) is type(b) and len(a) == len(b) and a.all_special_ids == b.all_special_ids
    assert text == b.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert a(text, add_special_tokens=False).input_ids == b(text, add_special_tokens=False).input_ids


def test_the_remembered_tokenizer_class_is_autotokenizers(
    tiny_llama, tiny_mistral, tmp_path, memo, monkeypatch
):
    """First load: AutoTokenizer, its class remembered. Second: that class, no AutoTokenizer call,
    the same tokenizer (class, vocabulary, special ids, chat template, token ids). Negative
    controls: a folder whose tokenizer_config.json changed is another key (AutoTokenizer again); a
    remembered class whose tokenizer does not match the record is not used."""
    from harness.judges.weights import load_tokenizer

    calls = _auto_calls(monkeypatch)
    firsts = {}
    for folder in (tiny_llama, tiny_mistral):
        firsts[folder] = load_tokenizer(folder)
        _same_tokenizer(firsts[folder], load_tokenizer(folder))
    assert calls == [str(tiny_llama), str(tiny_mistral)] and memo.is_file()

    changed = shutil.copytree(tiny_llama, tmp_path / "changed")
    load_tokenizer(changed)
    config = json.loads((changed / "tokenizer_config.json").read_text())
    (changed / "tokenizer_config.json").write_text(json.dumps({**config, "model_max_length": 77}))
    assert load_tokenizer(changed).model_max_length == 77 and calls[-2:] == [str(changed)] * 2

    import harness.judges.weights as weights

    for value in weights._tokenizer_classes().values():
        value["check"] = "0" * 16  # as if the class now built another tokenizer
    _same_tokenizer(load_tokenizer(tiny_llama), firsts[tiny_llama])
    assert calls[-1:] == [str(tiny_llama)] and len(calls) == 5


def test_the_config_is_read_as_its_json_where_it_says_enough(tiny_llama, tmp_path):
    """config.json as written gives the positions and architecture AutoConfig gives; one that
    leaves the positions to its class's defaults goes through AutoConfig (negative control: read
    as JSON it would have no positions)."""
    from transformers import AutoConfig

    from harness.judges.chat import model_positions
    from harness.judges.weights import config_value, load_config

    plain, auto = load_config(tiny_llama), AutoConfig.from_pretrained(str(tiny_llama))
    assert isinstance(plain, dict) and config_value(plain, "model_type") == auto.model_type == "llama"
    assert model_positions(plain) == model_positions(auto)

    folder = shutil.copytree(tiny_llama, tmp_path / "no-positions")
    config = json.loads((folder / "config.json").read_text())
    config.pop("max_position_embeddings")
    (folder / "config.json").write_text(json.dumps(config))
    assert model_positions(config) is None
    loaded, default = load_config(folder), AutoConfig.for_model("llama").max_position_embeddings
    assert not isinstance(loaded, dict) and model_positions(loaded) == default


def test_a_cpu_only_torch_build_is_read_from_its_version_file(tmp_path):
    """torch/version.py read as text says what torch.version says; a CUDA or ROCm build's file is
    not CPU-only (negative controls)."""
    import torch

    from harness.judges.device import cpu_only_build

    real = Path(torch.__file__).with_name("version.py")
    assert cpu_only_build(real) == (torch.version.cuda is None and torch.version.hip is None)
    for line in ("cuda: Optional[str] = '12.4'", "hip = '6.2.41133'"):
        fake = tmp_path / "version.py"
        fake.write_text(
            f"from typing import Optional\n__version__ = '2.5.0'\ncuda = None\nhip = None\n{line}\n"
        )
        assert not cpu_only_build(fake)
    (tmp_path / "version.py").write_text("cuda = None\n")  # no hip line: cannot tell
    assert not cpu_only_build(tmp_path / "version.py")


PROBE = textwrap.dedent("""
    import json, sys
    from harness.judges.hf import HFJudge
    from harness.records import PairRequest
    judge = HFJudge(sys.argv[1], device="cpu", threads=1)
    requests = [PairRequest("d", "a", "b", "Which summary is better? Answer A or B.")]
    judge.check_requests(requests)
    assert list(judge.stream_scores(requests, needed=[])) == []  # all cached: nothing to compute
    heavy = ["torch", "transformers.models.auto.tokenization_auto", "transformers.models.auto.configuration_auto"]
    before = [m for m in heavy if m in sys.modules]
    judge.torch_dtype  # the probe sees torch once something imports it
    print(json.dumps({"identity": judge.identity, "imported": before, "after": "torch" in sys.modules}))
""")


def test_a_cached_judge_is_built_and_asked_without_torch(tiny_llama, memo, monkeypatch):
    """A fresh interpreter builds the transformers judge on a folder whose tokenizer class is
    remembered, checks a prompt and serves a fully cached call: neither torch nor transformers'
    Auto classes are imported, and its identity (the cache key) is the one AutoTokenizer's
    tokenizer and AutoConfig's config give. Negative control: asking for the torch dtype imports
    torch, and the probe sees it."""
    from transformers import AutoTokenizer

    from harness.judges.hf import HFJudge
    from harness.judges.weights import load_tokenizer

    load_tokenizer(tiny_llama)  # remembered, as the first (cold) run does
    want = HFJudge(
        tiny_llama, device="cpu", tokenizer=AutoTokenizer.from_pretrained(str(tiny_llama))
    ).identity
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(Path.home()),
        "HARNESS_MODEL_CACHE": str(memo.parent),
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
    }
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(tiny_llama)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"identity": want, "imported": [], "after": True}
