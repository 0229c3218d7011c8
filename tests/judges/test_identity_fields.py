"""Every settings field of a local judge is either in its identity (the request cache's key) or in
the one exclusion list, settings.NOT_IN_IDENTITY, with its reason: a judge is built with each field
changed, and its identity must change exactly for the fields not excluded. A new field fails here
until it has a changed value below and a place in the identity or in the list."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from harness.judges import settings
from harness.judges.settings import NOT_IN_IDENTITY, HFSettings, ModelSettings, VLLMSettings, left_out

BASE_MODEL = {"labels": ["A", "B", "C"]}
"""The model settings every changed judge starts from (three labels, so tie_label can name one)."""

CHANGES: dict[str, dict[str, Any]] = {
    "model.revision": {"revision": "0123456789abcdef0123456789abcdef01234567"},
    "model.gguf_file": {"gguf_file": "model.Q4_1.gguf"},
    "model.labels": {"labels": ["B", "A", "C"]},
    "model.max_length": {"max_length": 64},
    "model.system_prompt": {"system_prompt": "Be brief."},
    "model.trust_remote_code": {"trust_remote_code": True},
    "model.dtype": {"dtype": "bfloat16"},
    "model.chat_template": {"chat_template": False},
    "model.chat_format": {"chat_format": "zepo"},
    "model.readout": {"readout": "generate"},
    "model.max_new_tokens": {"max_new_tokens": 8, "readout": "generate"},
    "model.tie_label": {"tie_label": "C"},
    "hf.device": {"device": "cuda"},
    "hf.dtype": {"dtype": "bfloat16"},
    "hf.batch_size": {"batch_size": 7},
    "hf.generate_batch_size": {"generate_batch_size": 3},
    "hf.engine": {"engine": "hf"},
    "hf.max_batch_tokens": {"max_batch_tokens": 128},
    "hf.prefix_reuse": {"prefix_reuse": True},
    "hf.threads": {"threads": 1},
    "hf.kernels": {"kernels": "torch"},
    "vllm.dtype": {"dtype": "bfloat16"},
    "vllm.tensor_parallel_size": {"tensor_parallel_size": 2},
    "vllm.gpu_memory_utilization": {"gpu_memory_utilization": 0.5},
    "vllm.enable_prefix_caching": {"enable_prefix_caching": False},
    "vllm.seed": {"seed": 7},
    "vllm.block_size": {"block_size": 64},
    "vllm.kv_cache_memory_bytes": {"kv_cache_memory_bytes": 1 << 28},
    "vllm.enforce_eager": {"enforce_eager": False},
    "vllm.in_process": {"in_process": False},
    "vllm.cpu_threads": {"cpu_threads": 1},
    "vllm.engine_args": {"engine_args": {"kv_cache_dtype": "fp8"}},
}
"""One changed value per settings field (a field's base is its default, with BASE_MODEL; where a
field matters only with another, e.g. max_new_tokens with readout=generate, both change and the
comparison is against a judge with the other alone)."""

KINDS = {"hf": (ModelSettings, HFSettings), "vllm": (ModelSettings, VLLMSettings)}


def unclassified(backend: str, kinds: tuple[type, ...]) -> list[str]:
    """Fields of `kinds` with no changed value in CHANGES (a new field, not yet classified)."""
    sections = ("model", backend)
    names = [f"{s}.{f.name}" for s, k in zip(sections, kinds) for f in dataclasses.fields(k)]
    return [n for n in names if n not in CHANGES]


def misclassified(identities: Mapping[str, bool], why: Callable[[str], str | None]) -> list[str]:
    """Fields whose identity moved (True) though `why` excludes them, or stayed though it does not."""
    return [
        f"{name}: {'moves the identity but is excluded' if moved else 'left out of the identity but not excluded'}"
        for name, moved in identities.items()
        if moved == (why(name) is not None)
    ]


def test_every_settings_field_is_classified():
    for backend, kinds in KINDS.items():
        assert unclassified(backend, kinds) == []
        assert set(settings.identity_settings(backend)) == {
            n for n in CHANGES if n.split(".")[0] in ("model", backend) and left_out(backend, n) is None
        }
    names = {k.split(":")[-1] for k in NOT_IN_IDENTITY}
    assert names <= set(CHANGES), "an exclusion names no settings field"
    assert all(len(reason) > 20 for reason in NOT_IN_IDENTITY.values())
    # negative control: a new field is unclassified until it has a changed value and a place
    grown = dataclasses.make_dataclass("Grown", [("n_gpu_layers", int, 0)], bases=(HFSettings,))
    assert unclassified("hf", (ModelSettings, grown)) == ["hf.n_gpu_layers"]


def _moved(build: Callable[[dict, dict], str], backend: str) -> dict[str, bool]:
    """For each field of `backend`'s settings: whether changing it changes the judge's identity."""
    base = build(dict(BASE_MODEL), {})
    out = {}
    for name, change in CHANGES.items():
        section = name.split(".")[0]
        if section not in ("model", backend):
            continue
        field = name.split(".")[1]
        others = {k: v for k, v in change.items() if k != field}
        model, back = (change, {}) if section == "model" else ({}, change)
        start = base if not others else build({**BASE_MODEL, **others}, {})
        out[name] = build({**BASE_MODEL, **model}, back) != start
    return out


def test_hf_identity_holds_every_field_but_the_excluded(tiny_llama, monkeypatch):
    """Each HFSettings and ModelSettings field changed alone: the identity moves iff it is not in
    NOT_IN_IDENTITY. The GPU is mocked (pick_device says cuda for device=cuda: no GPU here); a
    GGUF file name is carried with the model and tokenizer handed in (no GGUF to read here)."""
    from transformers import AutoTokenizer

    from harness.judges import hf
    from harness.judges.hf import HFJudge
    from harness.judges.weights import load_weights

    real = hf.pick_device
    monkeypatch.setattr(hf, "pick_device", lambda d: "cuda" if d == "cuda" else real(d))
    model = load_weights(tiny_llama, None, None, "cpu", None, False)
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)

    def build(model_options: dict, backend_options: dict) -> str:
        handed = {"model": model, "tokenizer": tokenizer}
        return HFJudge(
            tiny_llama,
            judge_model=ModelSettings(**model_options),
            backend=HFSettings(**{"device": "cpu", **backend_options}),
            **handed,
        ).identity

    moved = _moved(build, "hf")
    assert misclassified(moved, lambda n: left_out("hf", n)) == []
    # negative control: a field wrongly excluded, and one wrongly keyed, are both named
    doctored = {**NOT_IN_IDENTITY, "model.system_prompt": "wrong"}
    doctored.pop("hf.batch_size")
    assert misclassified(moved, lambda n: doctored.get(n)) == [
        "model.system_prompt: moves the identity but is excluded",
        "hf.batch_size: left out of the identity but not excluded",
    ]


@pytest.mark.slow  # importing vLLM takes ~10 s (no engine starts)
def test_vllm_identity_holds_every_field_but_the_excluded(monkeypatch):
    """The same for VLLMSettings, on a tiny real-vocabulary Llama-3 (the judge is built, its
    engine never starts; the tokenizer is read once and handed to every build)."""
    pytest.importorskip("vllm", reason="vLLM is not installed (README: Installs)")
    import transformers

    from harness.judges.vllm import VLLMJudge
    from harness.models.tiny import ensure_tiny_model

    path = ensure_tiny_model("llama3")
    read = transformers.AutoTokenizer.from_pretrained
    tokenizers: dict[tuple, Any] = {}

    def once(*args: Any, **kwargs: Any) -> Any:
        key = (args, tuple(sorted(kwargs.items())))
        if key not in tokenizers:
            tokenizers[key] = read(*args, **kwargs)
        return tokenizers[key]

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", once)

    def build(model_options: dict, backend_options: dict) -> str:
        return VLLMJudge(
            path,
            judge_model=ModelSettings(**model_options),
            backend=VLLMSettings(**backend_options),
            max_model_len=4096,
        ).identity

    moved = _moved(build, "vllm")
    assert misclassified(moved, lambda n: left_out("vllm", n)) == []
