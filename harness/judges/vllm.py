"""vLLM backend: the same prompts and answer tokens as HFJudge, scored by vLLM on a GPU.

vLLM is an optional extra (`pip install 'harness[vllm]'`, GPU clusters only: it pins its own
torch), imported inside `VLLMJudge.__init__` so the rest of the harness never needs it.

What we rely on (checked against vLLM's source, `vllm/sampling_params.py`, and its docs):
- `SamplingParams.logprob_token_ids: list[int]` returns log-probs for exactly those ids (at most
  `MAX_LOGPROB_TOKEN_IDS = 128`) in addition to the sampled token; when `logprobs` is left unset
  the number returned is `len(logprob_token_ids)` (`SamplingParams.num_logprobs`), and setting
  both with different values is a validation error.
- The values are the default `logprobs_mode="raw_logprobs"`: log-softmax over the full vocabulary
  before any logits processor, i.e. the numbers HFJudge computes, so we renormalise A vs B
  ourselves (AnswerTokens.score). `allowed_token_ids` would not give that.
- `RequestOutput.outputs[0].logprobs` is a list with one entry per generated token; each entry
  maps token id -> `Logprob` (attribute `.logprob`). With max_tokens=1 we read entry 0.
- Prompts go in as token ids (`{"prompt_token_ids": [...]}`) made by the HF tokenizer and the
  shared chat formatting (`hf.encode_prompts`), so vLLM scores byte-identical inputs and adds no
  BOS of its own (the official ZEPO format's second BOS comes from encode_prompts, as in HF);
  `tokenizer_mode="hf"` keeps vLLM off mistral_common for Mistral models.
- `readout: generate` (the official ZEPO read-out): greedy, up to `max_new_tokens`; with
  `logprob_token_ids` every generated step carries the answer ids' log-probs, so the answer is
  read at the first generated A/B token, as harness.judges.generate does with transformers.
- `llm.generate` batches internally; automatic prefix caching reuses KV across requests whose
  prompts share a prefix, so we submit everything at once, grouped so shared prefixes are adjacent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, JudgeInputError
from harness.judges.base import (
    AnswerTokens,
    resolve_answer_tokens,
    template_fingerprint,
)
from harness.judges.hf import (
    READOUTS,
    check_chat_format,
    encode_prompts,
    no_answer,
    readout_identity,
    readout_options,
)
from harness.models import resolve_model_path
from harness.types import PairRequest, PairScore


class VLLMJudge:
    """A vLLM-served causal LM as a pairwise judge (exact answer-token logprobs, prefix caching)."""

    def __init__(self, path: str | Path, *, name: str | None = None, revision: str | None = None,
                 dtype: str = "bfloat16", tensor_parallel_size: int = 1, max_model_len: int | None = None,
                 gpu_memory_utilization: float = 0.9, seed: int = 0, labels: Sequence[str] = ("A", "B"),
                 system_prompt: str | None = None, trust_remote_code: bool = False,
                 enable_prefix_caching: bool = True, chat_format: str = "default", readout: str = "next_token",
                 max_new_tokens: int = 32, tie_label: str | None = None, **engine_kwargs: Any) -> None:
        self.chat_format = check_chat_format(chat_format)
        if readout not in READOUTS:
            raise ConfigError(f"unknown readout {readout!r}; use {', '.join(READOUTS)}")
        self.readout, self.max_new_tokens = readout, int(max_new_tokens)
        try:
            import vllm
        except ImportError:
            raise ConfigError(
                "backend 'vllm' needs the vllm package, which is not installed: "
                "pip install 'harness[vllm]' on a CUDA machine, or use backend=hf"
            ) from None
        from transformers import AutoTokenizer

        self.system_prompt = system_prompt
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(path), revision=revision,
                                                           trust_remote_code=trust_remote_code)
        except (OSError, ValueError) as e:
            raise ConfigError(f"cannot load tokenizer from {path}: {str(e).strip().splitlines()[0]}") from None
        self.answers: AnswerTokens = resolve_answer_tokens(self.tokenizer, labels, tie_label)
        self.llm = vllm.LLM(
            model=str(path), tokenizer=str(path), tokenizer_mode="hf", revision=revision, dtype=dtype,
            tensor_parallel_size=int(tensor_parallel_size), max_model_len=max_model_len,
            gpu_memory_utilization=float(gpu_memory_utilization),
            seed=int(seed), trust_remote_code=trust_remote_code, enable_prefix_caching=bool(enable_prefix_caching),
            **engine_kwargs,
        )
        self.max_length = int(max_model_len or _engine_max_len(self.llm))
        self.params = vllm.SamplingParams(max_tokens=1 if readout == "next_token" else self.max_new_tokens,
                                          temperature=0.0, logprob_token_ids=list(self.answers.all_ids))
        name = name or Path(str(path)).name
        self.identity = "|".join([
            "vllm", name, revision or "-", "-", str(dtype).removeprefix("torch."),
            f"tmpl={template_fingerprint(getattr(self.tokenizer, 'chat_template', None))}",
            f"sys={template_fingerprint(system_prompt)}", self.answers.describe(),
            *readout_identity(self.chat_format, self.readout, self.max_new_tokens),
        ])

    def encode(self, requests: Sequence[PairRequest]) -> list[list[int]]:
        return encode_prompts(self.tokenizer, requests, self.system_prompt, self.max_length, self.chat_format)

    def score_pairs(self, requests: Sequence[PairRequest]) -> list[PairScore]:
        if not requests:
            return []
        ids = self.encode(requests)
        # Same document, then token order: prompts sharing the header+source, then the same
        # candidate A, then the same pair (many instructions) sit next to each other, which is
        # what vLLM's automatic prefix caching needs to hit.
        order = sorted(range(len(ids)), key=lambda i: (requests[i].doc_id, ids[i]))
        outputs = self.llm.generate([{"prompt_token_ids": ids[i]} for i in order], self.params,
                                    use_tqdm=False)
        scores: list[PairScore | None] = [None] * len(ids)
        for i, output in zip(order, outputs):
            step = 0 if self.readout == "next_token" else answer_step(output, self.answers.trigger_ids)
            scores[i] = (no_answer(self.answers) if step is None
                         else self.answers.score(self._answer_logprobs(requests[i], output, step)))
        return scores  # type: ignore[return-value]

    def _answer_logprobs(self, request: PairRequest, output: Any, step: int = 0) -> list[float]:
        steps = output.outputs[0].logprobs
        first: Mapping[int, Any] | None = steps[step] if steps and len(steps) > step else None
        if first is None:
            raise JudgeInputError(f"vLLM returned no logprobs for document {request.doc_id!r} "
                                  f"pair ({request.a_id}, {request.b_id})")
        values = []
        for tid in self.answers.all_ids:
            if tid not in first:
                raise JudgeInputError(f"vLLM left out answer token {tid} for document {request.doc_id!r} "
                                      f"pair ({request.a_id}, {request.b_id}); is logprob_token_ids supported?")
            entry = first[tid]
            values.append(float(getattr(entry, "logprob", entry)))
        return values


def answer_step(output: Any, triggers: set[int]) -> int | None:
    """Index of the first generated token that is an answer trigger (an A/B variant), or None."""
    return next((i for i, t in enumerate(output.outputs[0].token_ids) if t in triggers), None)


def _engine_max_len(llm: Any) -> int:
    """The context length vLLM settled on (from the model config when max_model_len is unset)."""
    for owner in (getattr(llm, "llm_engine", None), llm):
        config = getattr(owner, "model_config", None)
        if config is not None and getattr(config, "max_model_len", None):
            return int(config.max_model_len)
    raise ConfigError("cannot read max_model_len from the vLLM engine; pass max_model_len explicitly")


def build(judge_model: Mapping[str, Any], name: str = "vllm", **options: Any) -> VLLMJudge:
    """The judge `conf/backend/vllm.yaml` describes, for the weights in `conf/model/*.yaml`.
    `options` go to VLLMJudge (and from there to `vllm.LLM`)."""
    del name
    path, _ = resolve_model_path(str(judge_model["path"]))
    return VLLMJudge(path, name=judge_model.get("name"), revision=judge_model.get("revision"),
                     labels=tuple(judge_model.get("labels") or ("A", "B")), system_prompt=judge_model.get("system_prompt"),
                     max_model_len=judge_model.get("max_length"),
                     trust_remote_code=bool(judge_model.get("trust_remote_code", False)),
                     **readout_options(judge_model), **options)
