"""The local-chat base of the transformers and vLLM judges: how a prompt becomes the token ids a
local model reads (its chat template, the control-token-safe encoding of harness.judges.prompt_ids),
the context checks before anything is scored, and the identity that keys the request cache.

Shared the way lm-eval's `TemplateLM` shares tokenization: each backend keeps only its own engine,
so both score identical ids and neither imports the other. `encode_messages` and `ChatPrompts`
serve a chat user that is not a pairwise judge too (a whole conversation, no answer tokens): the
local and vLLM optimizers take their encoding, context check and weights identity from here.
A system prompt goes where the template puts it, or into the first user turn where the template
has no system role (`fold_system`, as Mistral's own tokenizer does it).
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, JudgeInputError
from harness.heap import release_freed_memory
from harness.judges.answers import AnswerTokens
from harness.judges.base import template_fingerprint
from harness.judges.head import LOGITS_SUFFIX
from harness.judges.kept_ids import PromptIds
from harness.judges.prompt_ids import SENTINEL, encode_chat
from harness.judges.settings import CHAT_FORMATS, ModelSettings
from harness.models.fingerprint import module_fingerprint, weights_fingerprint
from harness.records import PairRequest, PairScore


def check_chat_format(chat_format: str) -> str:
    if chat_format not in CHAT_FORMATS:
        raise ConfigError(f"unknown chat_format {chat_format!r}; use {', '.join(CHAT_FORMATS)}")
    return chat_format


# -- prompt -> text -----------------------------------------------------------------------------
FOLD = "\n\n"
"""Between a system text and the first user turn it is folded into, for a template without a
system role: Mistral's own tokenizer (mistral_common's InstructTokenizerV1) does exactly this."""
_ROLES: dict[int, tuple[bool, str]] = {}
"""system_role per (tokenizer, template), rendered once."""


def system_role(tokenizer: Any) -> tuple[bool, str]:
    """(whether the chat template has a system role, the system text it adds when given none:
    SmolLM2's "You are a helpful AI assistant named SmolLM, ..."). A template that refuses a system
    message (Mistral v0.1: "Conversation roles must alternate") or drops its text has none."""
    template = getattr(tokenizer, "chat_template", None)
    key = hash((id(tokenizer), template))
    if key not in _ROLES:
        user = [{"role": "user", "content": "\ue001"}]
        try:
            both = tokenizer.apply_chat_template(
                [{"role": "system", "content": SENTINEL}, *user], tokenize=False
            )
        except Exception as e:  # noqa: BLE001 (only jinja2's TemplateError is caught: _refused)
            if not _refused(e):
                raise
            both = ""
        if SENTINEL not in both:
            _ROLES[key] = (False, "")
        else:
            head, tail = both.split(SENTINEL, 1)
            alone = _render(tokenizer, user, False)
            m = re.fullmatch(re.escape(head) + "(.*)" + re.escape(tail), alone, re.DOTALL)
            _ROLES[key] = (True, m.group(1) if m else "")
    return _ROLES[key]


def fold_system(tokenizer: Any, messages: Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
    """`messages` as the template can take them: a leading system message folded into the first
    user turn (FOLD between them) when the template has no system role."""
    out = [dict(m) for m in messages]
    if (
        len(out) > 1
        and out[0].get("role") == "system"
        and out[1].get("role") == "user"
        and not system_role(tokenizer)[0]
    ):
        out[1]["content"] = out[0]["content"] + FOLD + out[1]["content"]
        out.pop(0)
    return out


def _refused(e: Exception) -> bool:
    """Whether `e` is jinja2's TemplateError (a template's `raise_exception`), told without importing
    jinja2 (transformers imports it when it renders a template)."""
    return any(c.__name__ == "TemplateError" and c.__module__.startswith("jinja2") for c in type(e).__mro__)


def _render(tokenizer: Any, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool) -> str:
    """The chat template applied; a template that refuses the conversation is one ConfigError."""
    try:
        return tokenizer.apply_chat_template(
            list(messages), tokenize=False, add_generation_prompt=add_generation_prompt
        )
    except Exception as e:  # noqa: BLE001 (only jinja2's TemplateError is caught: _refused)
        if not _refused(e):
            raise
        raise ConfigError(
            f"the chat template of {getattr(tokenizer, 'name_or_path', '') or 'the model'} refuses "
            f"the conversation ({e}); set model.chat_template=false to send plain text"
        ) from None


def format_chat(
    tokenizer: Any,
    prompt: str,
    system_prompt: str | None = None,
    chat_format: str = "default",
    *,
    chat_template: bool = True,
) -> str:
    """The exact text a judge model reads: its chat template, with the generation prompt unless
    `chat_format="zepo"` (a system prompt goes into the first user turn where the template has no
    system role: fold_system); or the prompt as plain text when the tokenizer has no template or
    `chat_template` is off (model.chat_template=false; the run's report card shows what that costs).

    Shared by every local backend (transformers, vLLM) so they score identical token ids.
    """
    if not chat_template or not getattr(tokenizer, "chat_template", None):
        if system_prompt:
            raise ConfigError(
                "model.system_prompt is set, but the tokenizer has no chat template to put it in "
                "(plain text has no system turn): leave model.system_prompt null, or use a model with a "
                "chat template"
            )
        return prompt
    messages = [{"role": "user", "content": prompt}]
    if system_prompt:
        messages.insert(0, {"role": "system", "content": system_prompt})
    return _render(tokenizer, fold_system(tokenizer, messages), check_chat_format(chat_format) == "default")


def format_chat_messages(tokenizer: Any, messages: Sequence[Mapping[str, str]]) -> str:
    """Chat-template text for a whole conversation (the optimizer's meta-prompt), else the contents."""
    if len(messages) == 1 and messages[0].get("role") == "user":
        return format_chat(tokenizer, messages[0]["content"])
    if getattr(tokenizer, "chat_template", None):
        return _render(tokenizer, fold_system(tokenizer, messages), True)
    return "\n\n".join(m["content"] for m in messages) + "\n"


def used_template(tokenizer: Any, chat_template: bool = True) -> str | None:
    """The chat template prompts are wrapped in (None when off or absent): part of the identity."""
    return getattr(tokenizer, "chat_template", None) if chat_template else None


# -- context checks -----------------------------------------------------------------------------
_LONGEST: dict[int, int] = {}
"""longest_token_chars per tokenizer (read once: the whole vocabulary is walked)."""


def longest_token_chars(tokenizer: Any) -> int:
    """Characters in the tokenizer's longest vocabulary entry (byte-level and SentencePiece entries
    are at least as long as the text they decode to): no token covers more of a prompt."""
    key = hash((id(tokenizer), len(tokenizer)))  # the size too: an id may be reused by another tokenizer
    if key not in _LONGEST:
        _LONGEST[key] = max((len(t) for t in tokenizer.get_vocab()), default=1) or 1
    return _LONGEST[key]


def refuse_overlong_texts(
    tokenizer: Any, texts: Sequence[str], max_length: int, where: Callable[[int], str]
) -> None:
    """Refuse, before tokenizing, a text with more characters than `max_length` tokens of the
    longest vocabulary entry could cover: it cannot fit, and tokenizing a 20 MB text takes minutes
    and gigabytes. `where(k)` names text k in the error ("prompt for document 'd1' pair (a, b)")."""
    most = max_length * longest_token_chars(tokenizer)
    for k, text in enumerate(texts):
        if len(text) > most:
            raise JudgeInputError(
                f"{where(k)} is {len(text):,} characters, at least "
                f"{len(text) // (most // max_length):,} tokens, longer than the model's context of {max_length}; "
                "judge shorter texts (or raise model.max_length up to what the model supports)"
            )


POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length")
"""Where a transformers config holds the number of positions the weights were trained for."""


def model_positions(config: Any) -> int | None:
    """The positions a model's config declares (its text config for a multimodal one), or None."""
    if not isinstance(config, Mapping):
        text = getattr(config, "get_text_config", lambda: config)()
        config = {k: getattr(text, k, None) for k in POSITION_KEYS}
    else:
        config = config.get("text_config") or config
    for key in POSITION_KEYS:
        v = config.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def model_vocab_size(config: Any) -> int | None:
    """The size of a model's output distribution (its text config's vocab_size), or None."""
    if isinstance(config, Mapping):
        value = (config.get("text_config") or config).get("vocab_size")
    else:
        value = getattr(getattr(config, "get_text_config", lambda: config)(), "vocab_size", None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 1 else None


def context_length(max_length: int | None, config: Any, where: str) -> int:
    """model.max_length checked against the weights' positions (one ConfigError before any
    prompt is scored): a longer context would score prompts at positions the weights never saw
    (RoPE extrapolation), with plausible-looking numbers. Unset: the weights' positions (2048
    when the config declares none)."""
    positions = model_positions(config)
    if max_length is None:
        return positions or 2048
    if positions is not None and int(max_length) > positions:
        raise ConfigError(
            f"model.max_length={max_length} is more than the {positions} positions the weights in {where} "
            f"declare (max_position_embeddings in its config): prompts past them would be scored at positions "
            f"the model never saw; set model.max_length={positions} or less"
        )
    return int(max_length)


# -- text -> token ids --------------------------------------------------------------------------
def encode_texts(
    tokenizer: Any,
    texts: Sequence[str],
    messages: Sequence[Sequence[str | None]],
    frame: Callable[[], str],
    add_special_tokens: bool,
    max_length: int,
    where: Callable[[int], str],
    new_tokens: int = 0,
    fix: str = "raise model.max_length (up to what the model supports) or judge shorter texts",
) -> list[list[int]]:
    """Token ids of chat-formatted `texts`, each text's `messages` kept plain text (prompt_ids;
    `frame()` renders the template around SENTINEL); refuses a text that cannot fit `max_length`
    with `new_tokens` generated after it (by its characters before tokenizing, by its ids after)
    and an empty one, `where(k)` naming it and `fix` saying what to do."""
    refuse_overlong_texts(tokenizer, texts, max_length, where)  # before a 20 MB text is tokenized
    ids = encode_chat(tokenizer, texts, messages, frame, add_special_tokens, where)
    check_ids(ids, max_length, where, new_tokens, fix)
    return ids


def check_ids(
    ids: Sequence[Sequence[int]],
    max_length: int,
    where: Callable[[int], str],
    new_tokens: int = 0,
    fix: str = "raise model.max_length (up to what the model supports) or judge shorter texts",
) -> None:
    """Refuse a row of token ids that cannot fit `max_length` with `new_tokens` generated after it,
    or an empty one, `where(k)` naming row k and `fix` saying what to do."""
    for k, row in enumerate(ids):
        if len(row) + new_tokens >= max_length:
            more = f" plus {new_tokens} to generate" if new_tokens else ""
            raise JudgeInputError(
                f"{where(k)} is {len(row)} tokens{more}, longer than the model's context of {max_length}; {fix}"
            )
        if not row:
            raise JudgeInputError(f"empty {where(k)}")


def encode_prompts(
    tokenizer: Any,
    requests: Sequence[PairRequest],
    system_prompt: str | None,
    max_length: int,
    chat_format: str = "default",
    *,
    chat_template: bool = True,
) -> list[list[int]]:
    """Chat-formatted token ids per request; refuses empty prompts and prompts over `max_length`.

    The default format adds no special tokens (the template holds the BOS); "zepo" lets the
    tokenizer add its BOS too, as `tokenizer(text)` does in the official code. Control-token
    strings inside the prompt or system prompt stay plain text (harness.judges.prompt_ids)."""
    texts = [
        format_chat(tokenizer, r.prompt, system_prompt, chat_format, chat_template=chat_template)
        for r in requests
    ]
    return encode_texts(
        tokenizer,
        texts,
        [(r.prompt, system_prompt) for r in requests],
        lambda: format_chat(
            tokenizer, SENTINEL, system_prompt and SENTINEL, chat_format, chat_template=chat_template
        ),
        chat_format == "zepo",
        max_length,
        lambda k: request_name(requests[k]),
    )


def request_name(request: PairRequest) -> str:
    """How an error names a request's prompt."""
    return f"prompt for document {request.doc_id!r} pair ({request.a_id}, {request.b_id})"


def encode_messages(
    tokenizer: Any,
    messages: Sequence[Mapping[str, str]],
    max_length: int,
    where: str = "chat prompt",
    new_tokens: int = 0,
    fix: str = "use shorter texts",
) -> list[int]:
    """Token ids of a whole conversation as `format_chat_messages` renders it, through the judges'
    path: message texts stay plain text, and a conversation that cannot fit `max_length` with
    `new_tokens` generated after it is refused. For a chat user that is not a pairwise judge (an
    optimizer). The template writes its own BOS; plain text (no template) gets the tokenizer's."""
    text = format_chat_messages(tokenizer, messages)
    return encode_texts(
        tokenizer,
        [text],
        [[m["content"] for m in messages]],
        lambda: format_chat_messages(tokenizer, [{**m, "content": SENTINEL} for m in messages]),
        not getattr(tokenizer, "chat_template", None),
        max_length,
        lambda _: where,
        new_tokens,
        fix,
    )[0]


# -- identity and read-out settings -------------------------------------------------------------
def no_answer(answers: AnswerTokens) -> PairScore:
    """The official score of a pair whose generation held no A/B token: 0.5 (`llama3.py:148-149`),
    flagged so judgments.jsonl shows it; greedy generation is deterministic, so the request cache
    keeps it with its flag and a rerun serves it as no_answer (harness.judges.cache)."""
    return PairScore(token_logprobs={}, p_a=0.5, flags=("no_answer",))


def readout_identity(chat_format: str, readout: str, max_new_tokens: int) -> list[str]:
    """Identity parts for a non-default format/read-out (none for the defaults, so existing
    cache keys stay valid)."""
    parts = [] if chat_format == "default" else [f"chat={chat_format}"]
    return parts + ([] if readout == "next_token" else [f"readout={readout}{int(max_new_tokens)}"])


def effective_system(chat: ChatPrompts) -> str:
    """The system text the model reads: model.system_prompt, else the one its chat template adds by
    itself (SmolLM2's; `system_role`); none without a template."""
    return chat.system_prompt or chat.template_facts()[1]


def template_facts(tokenizer: Any, chat_template: bool) -> tuple[str, str]:
    """(the fingerprint of the chat template prompts are wrapped in, the system text that template
    adds by itself): what a chat model's identity reads of its tokenizer."""
    template = used_template(tokenizer, chat_template)
    return template_fingerprint(template), system_role(tokenizer)[1] if template else ""


def chat_identity(chat: ChatPrompts, system: str | None = None) -> list[str]:
    """Identity parts of how a chat model wraps its prompts: its template and the system text it
    reads (`system`: another, for the identities an older harness wrote)."""
    return [
        f"tmpl={chat.template_facts()[0]}",
        f"sys={template_fingerprint(effective_system(chat) if system is None else system)}",
    ]


def weights_part(path: str | Path, gguf_file: str | None = None, model: Any = None) -> str:
    """The weights' fingerprint in every local identity (judge and optimizer alike): of the files at
    `path` (harness.models.fingerprint), or of `model`'s tensors when the weights were handed over
    in memory (`mem:...`)."""
    return weights_fingerprint(path, gguf_file) if model is None else f"mem:{module_fingerprint(model)}"


OLD_SYSTEM = (
    "keyed before the identity recorded the system prompt the chat template adds (an older harness; "
    "the same prompts)"
)
NO_WEIGHTS = (
    "keyed without the judge's weights (an older harness), so they may be another model's answers "
    "under this name"
)
NO_DEVICE = (
    "keyed before the identity named the device (an older harness), so they may be another device's "
    "numbers (cpu and cuda kernels differ, bf16 most)"
)
"""Why a legacy identity's rows are not served (CachedJudge names it once)."""


def device_part(device: str) -> str:
    """The identity's device part: the device's kind (`dev=cpu`, `dev=cuda`; cuda:1 is cuda)."""
    return f"dev={str(device).split(':')[0]}"


ENCODE_CHUNK = 1024
"""Prompts per tokenizer call when a judge tokenizes a run's prompts (ChatPrompts._rows)."""


class ChatPrompts:
    """Prompts -> token ids for a model holding a tokenizer and the chat settings (`system_prompt`,
    `max_length`, `chat_format`, `chat_template`): the base of the transformers and vLLM judges, so
    both score identical ids. A judge also holds its `answers`."""

    tokenizer: Any
    system_prompt: str | None
    max_length: int
    chat_format: str
    chat_template: bool
    readout: str
    max_new_tokens: int
    answers: AnswerTokens
    identity: str
    legacy_identity: str
    legacy_identities: dict[str, str]
    model_identity: str
    model_parts: list[str]
    weights: str

    def set_chat(self, settings: ModelSettings) -> None:
        """Keep the chat and read-out settings (checked by `settings.check()`, before any weights load)."""
        self.system_prompt = settings.system_prompt
        self.chat_format = settings.chat_format
        self.chat_template = bool(settings.chat_template)
        """False: prompts go in as plain text, without the tokenizer's chat template."""
        self.readout, self.max_new_tokens = settings.readout, int(settings.max_new_tokens)

    def template_facts(self) -> tuple[str, str]:
        """`template_facts` of this model's tokenizer (a judge may give them remembered instead)."""
        return template_facts(self.tokenizer, self.chat_template)

    def format_prompt(self, prompt: str) -> str:
        """The exact text the model reads (chat template; see CHAT_FORMATS)."""
        return format_chat(
            self.tokenizer, prompt, self.system_prompt, self.chat_format, chat_template=self.chat_template
        )

    def encode(self, requests: Sequence[PairRequest]) -> list[list[int]]:
        """Token ids per request, each prompt tokenized once per judge (`PromptIds`): the request
        checks, the engine and the run's work report read the same ids; a prompt kept from an
        earlier call is only checked against the context again."""
        rows = self._rows(requests)
        ids = [rows[r.prompt].tolist() for r in requests]
        check_ids(ids, self.max_length, lambda k: request_name(requests[k]))  # the context may have changed
        return ids

    def token_rows(self, requests: Sequence[PairRequest]) -> list[array]:
        """`encode`'s ids as the kept int32 rows themselves (4 bytes a token, not copied into lists
        of ints at about 36), for a reader that only counts them (the run's trie minimum)."""
        rows = self._rows(requests)
        return [rows[r.prompt] for r in requests]

    def _rows(self, requests: Sequence[PairRequest]) -> dict[str, array]:
        """prompt -> its token ids (int32), the prompts not kept tokenized ENCODE_CHUNK at a time
        (what the tokenizer builds per prompt, offsets and token strings included, is held for one
        chunk only, not for a whole run) and kept."""
        kept = self._kept_ids()
        rows: dict[str, array] = {}
        fresh: dict[str, PairRequest] = {}
        for r in requests:
            if r.prompt not in rows and r.prompt not in fresh:
                row = kept.row(r.prompt)
                if row is None:
                    fresh[r.prompt] = r
                else:
                    rows[r.prompt] = row
        todo = list(fresh.values())
        for at in range(0, len(todo), ENCODE_CHUNK):
            part = todo[at : at + ENCODE_CHUNK]
            encoded = encode_prompts(
                self.tokenizer,
                part,
                self.system_prompt,
                self.max_length,
                self.chat_format,
                chat_template=self.chat_template,
            )
            for r, ids in zip(part, encoded):
                rows[r.prompt] = array("i", ids)
                kept.put(r.prompt, rows[r.prompt])
            del encoded
            release_freed_memory(collect=False)  # the tokenizer's threads' output for the chunk
        return rows

    def forget_ids(self) -> None:
        """Drop the kept token ids: the next call tokenizes its prompts again (a fresh run's cost)."""
        self._ids_key = None

    def _kept_ids(self) -> PromptIds:
        """This judge's PromptIds, emptied when the tokenizer or the chat settings it was made under change."""
        key = (
            id(self.tokenizer),
            used_template(self.tokenizer, self.chat_template),
            self.system_prompt,
            self.chat_format,
        )
        if getattr(self, "_ids_key", None) != key:
            self._ids_key, self._ids = key, PromptIds()
        return self._ids

    def check_requests(self, requests: Sequence[PairRequest]) -> None:
        """JudgeInputError for a prompt this model cannot read (see judges.base.check_requests):
        `encode`'s tokenizing and checks, without building every request's ids as lists."""
        rows = self._rows(requests)
        self.check_token_counts(requests, [len(rows[r.prompt]) for r in requests])

    def check_token_counts(self, requests: Sequence[PairRequest], counts: Sequence[int]) -> None:
        """`check_requests` for prompts whose token counts are known (the request cache stores
        them): the same refusal, without tokenizing."""
        check_ids([range(n) for n in counts], self.max_length, lambda k: request_name(requests[k]))

    def kept_length(self, prompt: str) -> int | None:
        """The token count of a prompt this judge has tokenized and kept (None: not kept)."""
        return self._kept_ids().length(prompt)

    def encode_conversation(
        self, messages: Sequence[Mapping[str, str]], new_tokens: int, where: str, fix: str
    ) -> list[int]:
        """Token ids of a conversation this model continues for `new_tokens` (an optimizer's
        meta-prompt): the judges' encoding and context check (`encode_messages`)."""
        return encode_messages(self.tokenizer, messages, self.max_length, where, int(new_tokens), fix)

    def set_model_identity(
        self,
        backend: str,
        name: str,
        revision: str | None,
        gguf_file: str | None,
        dtype: str,
        weights: str,
        *,
        device: str,
    ) -> str:
        """`model_identity`: what decides this model's text whatever it is asked (backend, name,
        revision, quantisation file, dtype, the device kind (`dev=cpu`, `dev=cuda`: another device's
        kernels give other numbers in the same dtype), template, system text, `|w=<weights
        fingerprint>`). A judge's identity is it plus the read-out; an optimizer's, plus its
        sampling: one model's judge and optimizer share it."""
        self.model_parts = [backend, name, revision or "-", gguf_file or "-", dtype, device_part(device)]
        self.weights = weights
        self.model_identity = "|".join([*self.model_parts, *chat_identity(self), f"w={weights}"])
        return self.model_identity

    def set_identity(
        self,
        backend: str,
        name: str,
        revision: str | None,
        gguf_file: str | None,
        dtype: str,
        weights: str,
        float_logits: bool = False,
        *,
        device: str,
    ) -> None:
        """A local judge's `identity` (the request cache's key): `model_identity`'s parts with the
        answer tokens and read-out before `|w=`; with `float_logits` (a bf16/fp16 transformers judge)
        also `logits=float32` (harness.judges.head), so rows of the old bf16 head are not served.
        `legacy_identities`: the keys an older harness gave this judge, each with why its rows are
        not served (CachedJudge says so once and asks again): without the weights (`legacy_identity`),
        and with the configured system prompt where the template adds its own; and before it named
        the device (`dev=...`, NO_DEVICE)."""
        self.set_model_identity(backend, name, revision, gguf_file, dtype, weights, device=device)
        readout = [
            self.answers.describe(),
            *readout_identity(self.chat_format, self.readout, self.max_new_tokens),
            *([LOGITS_SUFFIX] if float_logits else []),
        ]

        def key(system: str | None, parts: list[str] = self.model_parts) -> str:
            return "|".join([*parts, *chat_identity(self, system), *readout])

        old_parts = self.model_parts[:-1]  # an older harness's: no device part
        self.identity = f"{key(None)}|w={weights}"
        self.legacy_identity = key(self.system_prompt or "", old_parts)
        self.legacy_identities = {
            self.legacy_identity: NO_WEIGHTS,
            f"{key(None, old_parts)}|w={weights}": NO_DEVICE,
        }
        if self.legacy_identity != key(None, old_parts):
            self.legacy_identities[f"{self.legacy_identity}|w={weights}"] = OLD_SYSTEM
