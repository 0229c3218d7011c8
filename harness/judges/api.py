"""OpenAI-compatible judge: one max_tokens=1 request per pair, answer-token logprobs read back.

Two read-outs:
- "exact": vLLM's `logprob_token_ids` extension returns the full-vocabulary logprob of exactly
  the answer ids (with `return_tokens_as_token_ids`, so entries are 'token_id:<id>' and no
  decoding ambiguity remains). Same numbers as the offline engines for the same weights.
- "top": plain OpenAI `top_logprobs=K` (K <= 20); the variants 'A', ' A', 'B', ' B' are looked
  up by text at the first position. Variants outside the top K are left out of
  PairScore.token_logprobs, counted in `stats['missing']` and count as probability 0 (their true
  probability is below the K-th entry's). A label with NO listed spelling has no readable
  probability: P(A) would read as exactly 0 or 1, so such a pair is unreadable (below).

Every answer is validated before it is used: logprobs present, each a number <= 0 (not NaN),
the listed tokens' probabilities summing to at most 1, and in exact mode every requested id
present with some probability. An answer failing that is asked again like a transport fault
(harness.api_client); one still failing when the retries are spent, or a top-K list naming no answer
label at all, gives P(A) = NaN with flags=("unreadable",): counted in `stats['unreadable']` and
in results.json, unjudged by every metric, never cached. So does a top-K list naming some label but
not another (not asked again: at temperature 0 the list is the same; `stats['unlisted']`, one
warning). Nothing becomes a silent 0.5, 0 or 1.

The endpoint is /chat/completions (messages: optional system prompt + the user prompt) or, when
`endpoint='completions'`, the legacy /completions with the prompt sent raw (no chat template).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from harness.api_client import (
    ENDPOINTS,
    ApiClient,
    MalformedResponse,
    Unusable,
    served_model,
)
from harness.errors import ConfigError
from harness.judges.answers import AnswerTokens, logsumexp, renormalise, resolve_answer_tokens
from harness.judges.base import template_fingerprint
from harness.judges.cpu import numerics
from harness.judges.settings import LOGPROB_MODES, ApiSettings, ModelSettings, from_config, with_options
from harness.models.resolve import resolve_model_path
from harness.records import PairRequest, PairScore

log = logging.getLogger(__name__)

MODES = LOGPROB_MODES
LOGPROB_TOLERANCE = 1e-4
"""How far above 0 a logprob (and above 1 a probability sum) may round before it is refused."""
_ID_PREFIX = "token_id:"


def answer_tokens_from_ids(token_ids: Mapping[str, int], labels: Sequence[str]) -> AnswerTokens:
    """AnswerTokens from a config mapping of variant text to id, e.g. {'A': 32, ' A': 362, ...}."""
    known = {v for label in labels for v in (label, " " + label)}
    extra = sorted(set(token_ids) - known)
    if extra:
        raise ConfigError(
            f"token_ids keys {extra} are not answer-label variants of {list(labels)} "
            "(use the label and the label with a leading space)"
        )
    variants: dict[str, tuple[tuple[str, int], ...]] = {}
    for label in labels:
        if label not in token_ids:
            raise ConfigError(f"token_ids lacks the bare label {label!r}")
        variants[label] = tuple((t, int(token_ids[t])) for t in (label, " " + label) if t in token_ids)
    ids = [i for vs in variants.values() for _, i in vs]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"token_ids repeat an id: {dict(token_ids)}")
    return AnswerTokens(labels=tuple(labels), variants=variants)


def _load_tokenizer(spec: str) -> Any:
    from transformers import AutoTokenizer

    path, gguf = resolve_model_path(spec)
    try:
        return AutoTokenizer.from_pretrained(path, **({"gguf_file": gguf} if gguf else {}))
    except (OSError, ValueError) as e:
        raise ConfigError(
            f"cannot load tokenizer {spec!r} to find answer-token ids: "
            f"{str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}"
        ) from None


def answer_tokens_from_tokenizer(spec: str, labels: Sequence[str]) -> AnswerTokens:
    """Resolve answer ids with the served model's tokenizer (an HF dir/id, tiny:*, pkg:*)."""
    return resolve_answer_tokens(_load_tokenizer(spec), labels)


def check_ids_in_vocabulary(answers: AnswerTokens, spec: str) -> None:
    """Configured token_ids must be the served tokenizer's ids of the label variants they name: an id
    outside the vocabulary or of another token would read a near-zero P(A) on every pair, unflagged."""
    tok = _load_tokenizer(spec)
    size = len(tok)
    expected = resolve_answer_tokens(tok, answers.labels)
    for label, pairs in answers.variants.items():
        allowed = {i for _, i in expected.variants[label]}
        for text, tid in pairs:
            if not 0 <= tid < size:
                raise ConfigError(
                    f"backend.token_ids[{text!r}]={tid} is outside the vocabulary of {spec} "
                    f"({size} tokens); its ids for {label!r} are {sorted(allowed)}: fix token_ids "
                    "or drop it (backend.token_ids={}) to take them from the tokenizer"
                )
            if tid not in allowed:
                raise ConfigError(
                    f"backend.token_ids[{text!r}]={tid} is {tok.convert_ids_to_tokens(tid)!r} in "
                    f"{spec}, not a spelling of {label!r} (its ids: {sorted(allowed)}); fix token_ids "
                    "or drop it (backend.token_ids={}) to take them from the tokenizer"
                )


class ApiJudge:
    """A judge served over an OpenAI-compatible HTTP API."""

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        *,
        judge_model: ModelSettings | None = None,
        backend: ApiSettings | None = None,
        client: ApiClient | None = None,
        **options: Any,
    ) -> None:
        """Built from `judge_model` (ModelSettings: conf/model; labels and system_prompt are read) and
        `backend` (ApiSettings: conf/backend/api), each keyword in `options` (and `base_url`)
        replacing the field of that name."""
        if base_url is not None:
            options["base_url"] = base_url
        (backend, judge_model), unknown = with_options(
            options, backend or ApiSettings(), judge_model or ModelSettings()
        )
        if unknown:
            raise TypeError(f"ApiJudge got unexpected keyword arguments {sorted(unknown)}")
        judge_model.check()  # built in code too (scripts, tests): the schema's checks, before any request
        backend.check()
        mode, endpoint, top_logprobs = backend.logprob_mode, backend.endpoint, backend.top_logprobs
        labels, system_prompt = tuple(judge_model.labels), judge_model.system_prompt
        token_ids, tokenizer = backend.token_ids, backend.tokenizer
        if mode not in MODES:
            raise ConfigError(f"unknown logprob_mode {mode!r}; use one of {', '.join(MODES)}")
        if endpoint not in ENDPOINTS:
            raise ConfigError(f"unknown endpoint {endpoint!r}; use chat or completions")
        if not 1 <= int(top_logprobs) <= 20:
            raise ConfigError(f"top_logprobs must be in 1..20 (the OpenAI limit), got {top_logprobs}")
        if mode != "exact" and int(top_logprobs) < len(labels):
            # With fewer listed tokens than labels one label is never listed: read as -inf, P(A) is
            # exactly 0 or 1.
            raise ConfigError(
                f"backend.top_logprobs={top_logprobs} lists fewer tokens than the {len(labels)} answer "
                f"labels {list(labels)}, so a label would read as probability 0; set "
                f"backend.top_logprobs={max(len(labels), 5)} or more (at most 20)"
            )
        if endpoint == "completions" and system_prompt:
            raise ConfigError(
                "system_prompt needs endpoint=chat (the completions endpoint sends the prompt raw)"
            )
        self.model, self.labels = model, tuple(labels)
        self.endpoint, self.system_prompt, self.top_logprobs = endpoint, system_prompt, int(top_logprobs)
        self.answers: AnswerTokens | None = None
        if token_ids:
            self.answers = answer_tokens_from_ids(token_ids, self.labels)
            if tokenizer:
                check_ids_in_vocabulary(self.answers, tokenizer)
        elif tokenizer and mode != "top":
            self.answers = answer_tokens_from_tokenizer(tokenizer, self.labels)
        if mode == "exact" and self.answers is None:
            raise ConfigError(
                "logprob_mode=exact needs the answer token ids: set token_ids or tokenizer "
                "(the served model's tokenizer: an HF dir/id, tiny:*, pkg:*)"
            )
        self.mode = "exact" if (mode != "top" and self.answers is not None) else "top"
        self.client = client or ApiClient(backend)
        self.base_url = self.client.settings.base_url.rstrip("/")
        readout = (
            self.answers.describe()
            if self.mode == "exact" and self.answers
            else f"top{self.top_logprobs}:{','.join(self.labels)}"
        )
        self.legacy_identity = "|".join(
            ["api", self.base_url, model, endpoint, readout, f"sys={template_fingerprint(system_prompt)}"]
        )
        """The identity cache keys had before the served model was part of it (CachedJudge)."""
        self._identity: str | None = None
        self.numerics = numerics("unknown (server)", "server", "api", "unknown (server)")
        """The server decides the dtype and device and does not report them (an OpenAI-compatible
        /models lists ids only), so the run says so rather than guess."""
        self.stats: Counter[str] = Counter()
        """requests, missing (answer variants absent from a response), unreadable (no label at all, or
        `unlisted`: some label with no listed spelling)."""
        self._warned = False

    @property
    def identity(self) -> str:
        """Base URL, model name, endpoint, read-out and system prompt, and the model the server says
        it serves (`served=`: /v1/models' id and, from vLLM, its weights' `root`): a server
        restarted on other weights under the same name gets other cache keys. Asked once, when
        first needed (the request cache's keys)."""
        if self._identity is None:
            self._identity = f"{self.legacy_identity}|served={self.served_model()}"
        return self._identity

    def served_model(self) -> str:
        """`<id>` or `<id>@<root>` of this model in the server's /models list; `unreported` (with
        one warning) when the server lists no such model or has no /models."""
        return served_model(self.client, self.model, "the judge", log)

    def __repr__(self) -> str:
        return f"ApiJudge(identity={self.identity!r})"

    # -- request bodies ------------------------------------------------------------------------
    def body(self, prompt: str) -> dict[str, Any]:
        """The JSON body for one prompt (exposed so users can see what is sent)."""
        body: dict[str, Any] = {"model": self.model, "max_tokens": 1, "temperature": 0}
        if self.endpoint == "chat":
            messages = [{"role": "user", "content": prompt}]
            if self.system_prompt:
                messages.insert(0, {"role": "system", "content": self.system_prompt})
            body["messages"] = messages
            body["logprobs"] = True
        else:
            body["prompt"] = prompt
        if self.mode == "exact" and self.answers is not None:
            ids = self.answers.all_ids
            body["logprob_token_ids"] = ids
            body["return_tokens_as_token_ids"] = True
            # vLLM requires logprobs (completions) / top_logprobs (chat) == len(ids) when both are set.
            body["top_logprobs" if self.endpoint == "chat" else "logprobs"] = len(ids)
        else:
            body["top_logprobs" if self.endpoint == "chat" else "logprobs"] = self.top_logprobs
        return body

    # -- scoring -------------------------------------------------------------------------------
    def score_pairs(self, requests: Sequence[PairRequest]) -> list[PairScore]:
        bodies = [self.body(r.prompt) for r in requests]
        responses = self.client.post_many(self.endpoint, bodies, check=self._check, unusable="return")
        self.stats["requests"] += len(responses)
        out = []
        for r, resp in zip(requests, responses):
            if isinstance(resp, Unusable):
                log.warning(
                    "%s: document %r pair (%s, %s) unreadable after every retry: %s",
                    self.base_url,
                    r.doc_id,
                    r.a_id,
                    r.b_id,
                    resp.reason,
                )
                out.append(self._unreadable())
            else:
                out.append(self._score(first_position(resp, self.endpoint)))
        return out

    def _check(self, resp: dict) -> None:
        """Content faults (retried by the client): malformed or impossible logprobs, ids left out."""
        entries = first_position(resp, self.endpoint)
        check_logprobs(entries)
        if self.mode == "exact" and self.answers is not None:
            by_id = _by_id(entries)
            left_out = [tid for tid in self.answers.all_ids if tid not in by_id]
            if left_out:
                if not self._warned:
                    self._warned = True
                    log.warning(
                        "%s: the server left out requested answer-token ids; it may not support "
                        "logprob_token_ids (use logprob_mode=top for such servers)",
                        self.base_url,
                    )
                raise MalformedResponse(f"answer-token ids {left_out} missing from the logprobs")
            if all(by_id[tid] == -math.inf for tid in self.answers.all_ids):
                raise MalformedResponse("every answer token has probability 0: P(A) cannot be renormalised")
        elif not any(text in entries for label in self.labels for text, _ in self._variants(label)):
            # top mode: no label among the K listed tokens may be a transient answer: ask again
            raise MalformedResponse(
                f"no answer label ({', '.join(self.labels)}) among the top {len(entries)} tokens"
            )

    def _unreadable(self) -> PairScore:
        self.stats["unreadable"] += 1
        return PairScore(token_logprobs={}, p_a=math.nan, flags=("unreadable",))

    def _score(self, entries: dict[str, float]) -> PairScore:
        """PairScore from one position's {token (text or 'token_id:N'): logprob} (already checked)."""
        by_id = _by_id(entries)
        token_logprobs: dict[str, float] = {}
        per_label: list[float] = []
        missing = 0
        for label in self.labels:
            found = []
            for text, tid in self._variants(label):
                value = by_id.get(tid) if tid is not None else None
                if value is None:
                    value = entries.get(text)
                if value is None:
                    missing += 1
                    continue
                token_logprobs[f"{label}:{text}"] = value
                found.append(value)
            per_label.append(logsumexp(found) if found else -math.inf)
        self.stats["missing"] += missing
        if all(v == -math.inf for v in per_label):  # top mode: no label among the K listed tokens
            return self._unreadable()
        unlisted = [label for label, v in zip(self.labels, per_label) if v == -math.inf]
        if unlisted:  # top mode: its probability is unknown, not 0; P(A) would read as exactly 0 or 1
            self._unlisted(unlisted)
            return PairScore(token_logprobs=token_logprobs, p_a=math.nan, flags=("unreadable",))
        return PairScore(token_logprobs=token_logprobs, p_a=renormalise(per_label[0], per_label[1:]))

    def _unlisted(self, labels: Sequence[str]) -> None:
        self.stats["unreadable"] += 1
        self.stats["unlisted"] += 1
        if self.stats["unlisted"] == 1:
            log.warning(
                "%s: the top %d log-probs list no spelling of label %s: its probability is unknown (only "
                "below the listed ones'), so P(A) is not read there; such pairs are flagged unreadable "
                "and counted. Raise backend.top_logprobs (at most 20) or use backend.logprob_mode=exact "
                "(vLLM's logprob_token_ids)",
                self.base_url,
                self.top_logprobs,
                " and ".join(map(repr, labels)),
            )

    def _variants(self, label: str) -> list[tuple[str, int | None]]:
        if self.mode == "exact" and self.answers is not None:
            return list(self.answers.variants[label])
        return [(label, None), (" " + label, None)]


def _by_id(entries: Mapping[str, float]) -> dict[int, float]:
    return {
        int(k[len(_ID_PREFIX) :]): v
        for k, v in entries.items()
        if k.startswith(_ID_PREFIX) and k[len(_ID_PREFIX) :].isdigit()
    }


def _logprob(value: Any, token: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MalformedResponse(f"logprob of token {token!r} is {value!r}, not a number")
    return float(value)


def check_logprobs(entries: Mapping[str, float]) -> None:
    """Every listed logprob a number <= 0 (not NaN), their probabilities summing to at most 1."""
    if not entries:
        raise MalformedResponse("the top_logprobs list is empty")
    for token, v in entries.items():
        if math.isnan(v) or v > LOGPROB_TOLERANCE:
            raise MalformedResponse(
                f"logprob {v!r} of token {token!r} is not a log-probability (a number <= 0)"
            )
    total = sum(math.exp(v) for v in entries.values())
    if total > 1 + LOGPROB_TOLERANCE:
        raise MalformedResponse(f"the listed tokens' probabilities sum to {total:.4f} > 1")
    if total == 0:
        raise MalformedResponse("every listed token has probability 0")


def first_choice(resp: dict) -> dict:
    """The choice with `index` 0 (the order of `choices` is not part of the API: a server that
    returns several may list them in any order); MalformedResponse when there is none."""
    choices = resp.get("choices")
    if not isinstance(choices, list) or not choices or not all(isinstance(c, dict) for c in choices):
        raise MalformedResponse("no choices in the response")
    if not any("index" in c for c in choices):
        return choices[0]
    first = [c for c in choices if c.get("index") == 0]
    if len(first) != 1:
        raise MalformedResponse(f"{len(first)} choices with index 0 in the response")
    return first[0]


def first_position(resp: dict, endpoint: str = "chat") -> dict[str, float]:
    """{token: logprob} of the first generated position's candidate list; MalformedResponse
    (asked again) when the body lacks choices or logprobs or an entry is not a token and a number."""
    choice = first_choice(resp)
    lp = choice.get("logprobs")
    if not isinstance(lp, dict):
        raise MalformedResponse("the answer has no logprobs (the server must support logprobs/top_logprobs)")
    if endpoint == "chat":
        content = lp.get("content")
        if not isinstance(content, list) or not content or not isinstance(content[0], dict):
            raise MalformedResponse("logprobs.content is empty")
        top = content[0].get("top_logprobs")
        if not isinstance(top, list):
            raise MalformedResponse("logprobs.content[0].top_logprobs is not a list")
        out: dict[str, float] = {}
        for e in top:
            if not isinstance(e, dict) or "token" not in e or "logprob" not in e:
                raise MalformedResponse("a top_logprobs entry lacks token/logprob")
            out.setdefault(str(e["token"]), _logprob(e["logprob"], e["token"]))  # first (highest) wins
        return out
    top = lp.get("top_logprobs")
    if not isinstance(top, list) or not top or not isinstance(top[0], dict):
        raise MalformedResponse("logprobs.top_logprobs[0] is not an object")
    return {str(k): _logprob(v, k) for k, v in top[0].items()}


def build(judge_model: Mapping[str, Any], name: str | None = None, **options: Any) -> ApiJudge:
    """The judge `conf/backend/api.yaml` describes for `judge_model` (conf/model/*.yaml). The server-side
    model name is backend.model, else the model's name; in exact mode without explicit token ids, the
    served model's tokenizer (model.path) gives the answer ids."""
    del name
    settings = from_config(ModelSettings, judge_model)
    backend = from_config(ApiSettings, options)
    if not settings.chat_template and backend.endpoint == "chat":
        raise ConfigError(
            "model.chat_template=false needs backend.endpoint=completions: the chat endpoint "
            "always applies the server's chat template"
        )
    if settings.chat_format != "default" or settings.readout != "next_token" or settings.tie_label:
        raise ConfigError(
            "model.chat_format=zepo, model.readout=generate and model.tie_label need the model's "
            "tokens and logits: use backend=hf or backend=vllm (the server applies its own chat "
            "template and returns top log-probs only)"
        )
    served = options.get("model") or judge_model.get("name")
    if backend.logprob_mode != "top" and not backend.tokenizer:
        backend.tokenizer = str(judge_model["path"])  # gives the ids, or checks configured token_ids
    return ApiJudge(model=served, judge_model=settings, backend=backend)
