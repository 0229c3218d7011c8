"""Paraphrase generators for ZEPO: an OpenAI-compatible API model, a local transformers model, or
the judge's own vLLM engine.

`paraphrase(instruction, n, seed, aspect)` returns n validated paraphrases of a judge instruction;
`propose(...)` returns the same with per-candidate metadata (attempts, rejections). Each sample
has an index (0, 1, 2, ... in a fixed order) and its own seed derived from (seed, index), so a
run is reproducible and every sample can be cached: with a CompletionCache, a resumed search
repeats no optimizer call. A candidate is rejected (and re-asked, up to `max_attempts` per slot)
when it is empty, a list of alternatives, drops the aspect word or an answer label, is too
short/long against the original (whitespace collapsed: below 0.1x or above 3x by default), or
duplicates the original or an earlier candidate. Every rejected output is appended, with its
reason, to `reject_log` (a run's rejections.jsonl) when one is set.

`meta_prompt="zepo"` asks with the official meta-prompt (`zepo.py:27-33`: 4-space indents, the raw
instruction, the official aspect key as the keyword) and, as the official code, takes the reply
verbatim: no cleaning, no validation but a check that it is not empty.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from tqdm import tqdm

from harness.api_client import (
    ApiClient,
    CompletionCache,
    MalformedResponse,
    completion_key,
    served_model,
)
from harness.errors import ConfigError, HarnessError
from harness.judges.base import innermost
from harness.judges.chat import ChatPrompts, context_length, weights_part
from harness.judges.device import dtype_name, pick_device, pick_dtype
from harness.judges.settings import ModelSettings, from_config, with_options
from harness.judges.weights import load_model_and_tokenizer
from harness.models.resolve import resolve_model_path
from harness.progress import heartbeat
from harness.prompts import zepo_key
from harness.zepo.sampling import sample_tokens, turn_end_ids
from harness.zepo.settings import ApiOptimizerSettings, LocalSettings, SamplingSettings
from harness.zepo.validation import (
    META_PROMPT,
    ZEPO_META_PROMPT,
    aspect_word,
    sample_seed,
    validate,
)


class ParaphraseError(HarnessError):
    """The optimizer produced no valid paraphrase for a slot within max_attempts."""

    def __init__(self, message: str, rejected: dict[int, tuple[Rejection, ...]] | None = None) -> None:
        super().__init__(message)
        self.rejected = rejected or {}
        """Failed slot -> its rejected samples (for logs)."""


@dataclass(frozen=True)
class Rejection:
    """One sample that failed validation."""

    sample: int
    """Its sample index (cache key part)."""
    reason: str
    """Why it was rejected, e.g. "missing the aspect word 'coherence'"."""
    text: str
    """The raw completion, for the log."""


@dataclass(frozen=True)
class ParaphraseCandidate:
    """One accepted paraphrase with how it was obtained."""

    text: str
    """The cleaned, validated instruction."""
    sample: int
    """Sample index of the accepted completion."""
    attempts: int
    """Samples spent on this slot, the accepted one included (1 = first try)."""
    rejected: tuple[Rejection, ...] = ()
    """The slot's failed samples, in order."""


@dataclass(frozen=True)
class Proposal:
    """What one `propose` call returns."""

    candidates: tuple[ParaphraseCandidate, ...]
    """n candidates, in slot order."""
    samples: int
    """Completions used (cache hits included)."""
    cache_hits: int
    """Completions served from the cache (no call made)."""

    @property
    def texts(self) -> list[str]:
        return [c.text for c in self.candidates]


@runtime_checkable
class Optimizer(Protocol):
    """What ZEPO needs from an optimizer LLM."""

    identity: str

    def paraphrase(self, instruction: str, n: int, seed: int, aspect: str) -> list[str]: ...


# -- the shared loop ----------------------------------------------------------------------------
class _Paraphraser:
    """Slots, attempts, validation and caching; subclasses implement `complete`."""

    identity: str
    model_name: str
    location: str

    def __init__(
        self,
        settings: SamplingSettings,
        *,
        max_tokens: int,
        labels: Sequence[str] | None,
        cache: CompletionCache | str | Path | None,
    ) -> None:
        settings.check()  # built in code too (scripts, tests): the schema's checks, before any model loads
        self.settings = settings
        self.meta_prompt = settings.meta_prompt
        self.reject_log: Path | None = None
        """Where every rejected output is appended (JSON lines), or None."""
        self.rejections = 0
        """Outputs rejected since construction."""
        self.temperature, self.max_tokens, self.top_p = (
            float(settings.temperature),
            int(max_tokens),
            float(settings.top_p),
        )
        self.max_attempts = int(settings.max_attempts)
        self.labels = tuple(ModelSettings().labels if labels is None else labels)
        """The judge's answer labels, which a paraphrase must keep (null: ModelSettings' default)."""
        self.min_ratio, self.max_ratio = float(settings.min_ratio), float(settings.max_ratio)
        self.cache = CompletionCache(cache) if isinstance(cache, (str, Path)) else cache
        self.calls = 0
        """Completions actually generated / requested (cache misses) since construction."""
        self.progress = True
        """A tqdm bar (samples done/total, rate, ETA) while completions are generated (the run's
        `progress` setting: show_progress)."""

    def _meta_identity(self) -> str:
        return "" if self.meta_prompt == "default" else f"|meta={self.meta_prompt}"

    def messages(self, instruction: str, aspect: str) -> list[dict[str, str]]:
        if self.meta_prompt == "zepo":
            return [
                {
                    "role": "user",
                    "content": ZEPO_META_PROMPT.format(aspect=zepo_key(aspect), instruction=instruction),
                }
            ]
        word = aspect_word(aspect, instruction)
        return [
            {"role": "user", "content": META_PROMPT.format(aspect_word=word, instruction=instruction.strip())}
        ]

    def check(self, raw: str, instruction: str, word: str, seen: Sequence[str]) -> tuple[str, str | None]:
        """(text, None) if `raw` is accepted, else (text, reason). The official mode takes any
        non-empty reply as it is."""
        if self.meta_prompt == "zepo":
            return raw, None if raw.strip() else "empty"
        return validate(
            raw,
            instruction,
            word,
            seen,
            labels=self.labels,
            min_ratio=self.min_ratio,
            max_ratio=self.max_ratio,
        )

    def _record(self, rejection: Rejection, seed: int, instruction: str, cached: bool) -> None:
        self.rejections += 1
        if self.reject_log is None:
            return
        row = {
            "seed": seed,
            "sample": rejection.sample,
            "reason": rejection.reason,
            "text": rejection.text,
            "cached": cached,
            "paraphrasing": instruction[:80],
            "optimizer": self.identity,
        }
        self.reject_log.parent.mkdir(parents=True, exist_ok=True)
        with self.reject_log.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")

    def paraphrase(
        self, instruction: str, n: int, seed: int, aspect: str, avoid: Sequence[str] = ()
    ) -> list[str]:
        return self.propose(instruction, n, seed, aspect, avoid).texts

    def propose(
        self, instruction: str, n: int, seed: int, aspect: str, avoid: Sequence[str] = ()
    ) -> Proposal:
        """n validated paraphrases; re-asks failed slots (in rounds) up to max_attempts each.

        `avoid`: texts that count as duplicates too (e.g. every instruction already scored).
        Samples are numbered 0, 1, ... in slot order per round, so the same (instruction, seed)
        always asks for the same samples: pass a different seed where fresh samples are wanted.
        """
        if n < 0:
            raise ConfigError(f"n must be >= 0, got {n}")
        word = aspect_word(aspect, instruction)
        messages = self.messages(instruction, aspect)
        accepted: dict[int, ParaphraseCandidate] = {}
        rejected: dict[int, list[Rejection]] = {i: [] for i in range(n)}
        next_sample, hits = 0, 0
        for _ in range(self.max_attempts):
            pending = [i for i in range(n) if i not in accepted]
            if not pending:
                break
            samples = list(range(next_sample, next_sample + len(pending)))
            next_sample += len(pending)
            texts, h = self._cached_complete(messages, seed, samples)
            hits += h
            for slot, sample, raw in zip(pending, samples, texts):
                seen = [*avoid, *(c.text for c in accepted.values())]
                text, reason = self.check(raw, instruction, word, seen)
                if reason is None:
                    accepted[slot] = ParaphraseCandidate(
                        text, sample, len(rejected[slot]) + 1, tuple(rejected[slot])
                    )
                else:
                    rejected[slot].append(Rejection(sample, reason, raw))
                    self._record(rejected[slot][-1], seed, instruction, cached=h == len(samples))
        failed = [i for i in range(n) if i not in accepted]
        if failed:
            reasons = sorted({r.reason for i in failed for r in rejected[i]})
            last = rejected[failed[0]][-1].text if rejected[failed[0]] else ""
            raise ParaphraseError(
                f"optimizer {self.model_name} gave no valid paraphrase for {len(failed)} of {n} slots after "
                f"{self.max_attempts} attempts each; reasons: {'; '.join(reasons)}; last reply: {last[:120]!r}",
                {i: tuple(rejected[i]) for i in failed},
            )
        return Proposal(tuple(accepted[i] for i in range(n)), next_sample, hits)

    def _cached_complete(
        self, messages: list[dict[str, str]], seed: int, samples: list[int]
    ) -> tuple[list[str], int]:
        params = {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens}
        keys = [completion_key(self.model_name, self.location, messages, params, seed, s) for s in samples]
        found = {k: self.cache.get(k) for k in keys} if self.cache is not None else {}
        todo = [(k, s) for k, s in zip(keys, samples) if found.get(k) is None]
        if todo:
            with (
                tqdm(
                    total=len(todo),
                    desc=f"paraphrasing ({self.model_name})",
                    unit="sample",
                    disable=not self.progress,
                    dynamic_ncols=True,
                ) as bar,
                heartbeat(bar),
            ):
                texts = self.complete(messages, [sample_seed(seed, s) for _, s in todo], progress=bar)
                bar.update(len(todo) - bar.n)  # what complete did not tick itself (API, vLLM: the whole call)
            self.calls += len(todo)
            for (k, _), t in zip(todo, texts):
                found[k] = t
                if self.cache is not None:
                    self.cache.put(k, self.model_name, t)
        return [found[k] or "" for k in keys], len(samples) - len(todo)

    def complete(self, messages: list[dict[str, str]], seeds: list[int], progress: Any = None) -> list[str]:
        """Raw completions, one per seed, in order (no validation, no cache); `progress`, a bar
        to tick per completion where the backend says when each one is done."""
        raise NotImplementedError

    def generate(self, messages: list[dict[str, str]], seed: int, samples: Sequence[int]) -> list[str]:
        """Raw completions of any messages through the completion cache, no validation: other uses of
        the optimizer model that own their prompt and checks (A-BB answer paraphrases)."""
        return self._cached_complete(messages, seed, list(samples))[0]


class ApiOptimizer(_Paraphraser):
    """An optimizer LLM behind an OpenAI-compatible /chat/completions endpoint."""

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        *,
        settings: ApiOptimizerSettings | None = None,
        labels: Sequence[str] | None = None,
        cache: CompletionCache | str | Path | None = None,
        client: ApiClient | None = None,
        **options: Any,
    ) -> None:
        """Built from `settings` (conf/optimizer/api.yaml), each keyword in `options` (and
        `base_url`) replacing the field of that name."""
        settings = _settings(ApiOptimizerSettings, settings, options, base_url=base_url)
        super().__init__(settings, max_tokens=settings.max_tokens, labels=labels, cache=cache)
        self.client = client or ApiClient(settings)
        self.model_name = model
        self.base_url = self.client.settings.base_url.rstrip("/")
        self._served: str | None = None

    @property
    def location(self) -> str:  # type: ignore[override]
        """The server part of the cache key and identity: the URL and what it serves under this name
        (`<id>@<root>`, `unreported` with one warning), asked once: other weights, other optimizer."""
        self._served = self._served or served_model(self.client, self.model_name, "the optimizer's")
        return f"{self.base_url}|served={self._served}"

    @property
    def identity(self) -> str:  # type: ignore[override]
        return f"api|{self.location}|{self.model_name}|t={self.temperature}" + self._meta_identity()

    def __repr__(self) -> str:
        return f"ApiOptimizer(identity={self.identity!r})"

    def complete(self, messages: list[dict[str, str]], seeds: list[int], progress: Any = None) -> list[str]:
        bodies = [
            {
                "model": self.model_name,
                "messages": messages,
                "temperature": self.temperature,
                "top_p": self.top_p,
                "max_tokens": self.max_tokens,
                "seed": s,
                "n": 1,
            }
            for s in seeds
        ]
        return [_message_text(r) for r in self.client.post_many("chat", bodies, check=_message_text)]


def _message_text(resp: dict) -> str:
    choices = resp.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise MalformedResponse("no choices in the response")
    msg = choices[0].get("message")
    if not isinstance(msg, dict):
        raise MalformedResponse("choices[0].message is missing")
    content = msg.get("content")
    return content if isinstance(content, str) else ""


CONTEXT_FIX = (
    "lower optimizer.max_new_tokens, or use an optimizer model (optimizer.path) with a longer context"
)
"""What to do when the meta-prompt and the reply cannot fit the optimizer model's positions."""


class LocalOptimizer(_Paraphraser, ChatPrompts):
    """A transformers causal LM sampling paraphrases on CPU/GPU with seeded torch generators.

    Its prompts go through the judges' chat layer (harness.judges.chat): the meta-prompt is encoded
    with control-token strings kept as text and refused in one line when it and `max_new_tokens`
    cannot fit the weights' positions; its identity (and so its completion-cache key and ZEPO's
    resume check) holds the weights' fingerprint, as a judge's does."""

    def __init__(
        self,
        path: str | Path,
        *,
        name: str | None = None,
        settings: LocalSettings | None = None,
        labels: Sequence[str] | None = None,
        cache: CompletionCache | str | Path | None = None,
        model: Any = None,
        tokenizer: Any = None,
        model_identity: str | None = None,
        **options: Any,
    ) -> None:
        """Built from `settings` (conf/optimizer/local.yaml less path), each keyword in `options`
        replacing the field of that name."""
        settings = _settings(LocalSettings, settings, options)
        super().__init__(settings, max_tokens=settings.max_new_tokens, labels=labels, cache=cache)
        gguf_file, dtype, device = settings.gguf_file, settings.dtype, settings.device
        self.device = pick_device(device)
        handed, local = model is not None and tokenizer is not None, str(path)
        if model is None or tokenizer is None:
            local, gguf_file = resolve_model_path(str(path), gguf_file)
            model, tokenizer = load_model_and_tokenizer(
                local, gguf_file, pick_dtype(dtype, self.device), self.device
            )
        self.model, self.tokenizer = model, tokenizer
        self.set_chat(ModelSettings())  # the template with its generation prompt, no system prompt
        self.max_length = context_length(None, model.config, local)
        self.model_name = name or Path(str(path)).name
        # Weights handed over by a judge keep its identity (`model_identity`): one model, one key.
        self.model_identity = model_identity or self.set_model_identity(
            "hf",
            self.model_name,
            None,
            gguf_file,
            dtype_name(dtype, self.device),
            weights_part(local, gguf_file, model if handed else None),
            device=self.device,
        )
        self.location = self.model_identity
        self.identity = f"{self.model_identity}|t={self.temperature}" + self._meta_identity()
        self.stop_ids = turn_end_ids(model, tokenizer)

    def __repr__(self) -> str:
        return f"LocalOptimizer(identity={self.identity!r})"

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        return self.encode_conversation(messages, self.max_tokens, "the optimizer's meta-prompt", CONTEXT_FIX)

    def complete(self, messages: list[dict[str, str]], seeds: list[int], progress: Any = None) -> list[str]:
        rows = sample_tokens(
            self.model,
            self.prompt_ids(messages),
            seeds,
            max_new_tokens=self.max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            stop_ids=self.stop_ids,
            progress=progress,
        )
        return [self.tokenizer.decode(r, skip_special_tokens=True) for r in rows]


class VLLMOptimizer(_Paraphraser):
    """Paraphrases sampled by the judge's own vLLM engine (backend=vllm), so the optimizer holds no
    second copy of the model; each sample has its own seed, as in LocalOptimizer (the numbers
    differ: another sampler), hence its own cache location: the judge's `model_identity` (weights
    included), which starts with `vllm|`."""

    def __init__(
        self,
        judge: Any,
        *,
        name: str | None = None,
        settings: LocalSettings | None = None,
        labels: Sequence[str] | None = None,
        cache: CompletionCache | str | Path | None = None,
        **options: Any,
    ) -> None:
        """Built from `settings` (conf/optimizer/local.yaml: its sampling keys and max_new_tokens),
        each keyword in `options` replacing the field of that name."""
        settings = _settings(LocalSettings, settings, options)
        super().__init__(settings, max_tokens=settings.max_new_tokens, labels=labels, cache=cache)
        self.judge = judge
        self.model_name = name or judge.model_parts[1]
        self.location = judge.model_identity
        self.identity = f"{judge.model_identity}|t={self.temperature}" + self._meta_identity()

    def __repr__(self) -> str:
        return f"VLLMOptimizer(identity={self.identity!r})"

    def complete(self, messages: list[dict[str, str]], seeds: list[int], progress: Any = None) -> list[str]:
        return self.judge.sample(
            messages, seeds, temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_tokens
        )


def show_progress(optimizer: Any, on: bool) -> None:
    """Have `optimizer` show (or not) a progress bar while it generates (the run's `progress`)."""
    if hasattr(optimizer, "progress"):
        optimizer.progress = bool(on)


def log_rejections(optimizer: Any, path: Path) -> None:
    """Have `optimizer` append every rejected output to `path` (JSON lines), if it validates at all."""
    if hasattr(optimizer, "reject_log"):
        optimizer.reject_log = Path(path)


# -- builders (the `_target_` of conf/optimizer/*.yaml) ----------------------------------------
def loaded_judge(judge: Any) -> Any:
    """The judge holding loaded transformers weights under any wrappers, or None (an API judge's
    `model` is a name, not weights)."""
    inner = innermost(judge) if judge is not None else None
    return inner if hasattr(inner, "tokenizer") and not isinstance(getattr(inner, "model", ""), str) else None


def _settings(kind: type, given: Any, options: dict[str, Any], **more: Any) -> Any:
    """`given` (else `kind`'s defaults) with each option replacing its field; an unknown one: TypeError."""
    options.update({k: v for k, v in more.items() if v is not None})
    (settings,), unknown = with_options(options, given or kind())
    if unknown:
        raise TypeError(f"{kind.__name__} has no fields {sorted(unknown)}")
    return settings


def _labels(judge_model: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(from_config(ModelSettings, judge_model).labels)


def build_local(
    *,
    judge_model: Mapping[str, Any],
    judge: Any = None,
    cache: CompletionCache | str | Path | None = None,
    name: str | None = None,
    **options: Any,
) -> LocalOptimizer:
    """conf/optimizer/local.yaml: a local model; with the judge's own weights (optimizer.path ==
    model.path) the judge's loaded model is reused instead of loading a second copy: its
    transformers model, or its vLLM engine (backend=vllm: a VLLMOptimizer samples through it)."""
    del name
    settings, path = from_config(LocalSettings, options), options.get("path")
    engine = innermost(judge) if judge is not None else None
    same = str(path) == str(judge_model.get("path"))
    if callable(getattr(engine, "sample", None)) and same:
        return VLLMOptimizer(  # type: ignore[return-value]
            engine, name=judge_model.get("name"), settings=settings, labels=_labels(judge_model), cache=cache
        )
    inner = loaded_judge(judge) if same else None  # reading its `model` loads the judge's weights
    shared: dict[str, Any] = {}
    if inner is not None:
        shared = {
            "model": inner.model,
            "tokenizer": inner.tokenizer,
            "model_identity": inner.model_identity,
            "name": judge_model.get("name"),
        }
    return LocalOptimizer(path, settings=settings, labels=_labels(judge_model), cache=cache, **shared)


def build_api(
    *,
    judge_model: Mapping[str, Any],
    judge: Any = None,
    cache: CompletionCache | str | Path | None = None,
    name: str | None = None,
    **options: Any,
) -> ApiOptimizer:
    """conf/optimizer/api.yaml: an OpenAI-compatible chat model (the key from api_key_env)."""
    del name, judge
    settings = from_config(ApiOptimizerSettings, options)
    return ApiOptimizer(options["model"], settings=settings, labels=_labels(judge_model), cache=cache)
