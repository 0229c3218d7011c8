"""The exact prompt a judge read, for the report page: one chat-wrapped skeleton per judged set,
whose text slots the page's script fills from the documents it already holds.

Why a skeleton and not every prompt: a pair's prompt repeats its whole document, so storing each
one makes the page grow by the document's length per pair; the skeleton is the judge's own chat
wrapping (the judge's `format_prompt`, harness.judges.chat, which every local judge encodes) of the user message
(`harness.prompts.render`) with markers in the source, context and candidate slots, made once per
set. Every pair's filled skeleton is checked here against the real wrapping of its real prompt; a
pair where they differ (a template that rewrites the texts) carries its exact prompt instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.judges.base import template_fingerprint
from harness.judges.chat import ChatPrompts
from harness.judges.settings import ModelSettings, from_config
from harness.judges.weights import load_tokenizer
from harness.judging import model_judge
from harness.models.resolve import resolve_model_path
from harness.prompts import render
from harness.records import Candidate, Document

SLOTS = ("source", "context", "a", "b")
"""The user message's text slots, filled from the document and the two candidates."""
MARK = re.compile("\ue000(source|context|a|b)\ue001")
"""A slot marker (private-use characters, which no template rewrites); report.js splits on the same."""


def marker(slot: str) -> str:
    return f"\ue000{slot}\ue001"


@dataclass(frozen=True)
class ChatView:
    """How the judge turned a user message into what it read."""

    wrap: Callable[[str], str] | None
    """User message -> the exact text the model read; None when that cannot be rebuilt here."""
    note: str
    """One line for the page: which wrapping this is (or why it is missing)."""


def local_view(judge: Any) -> ChatView:
    """The wrapping of a transformers or vLLM judge (both share format_chat and its settings)."""
    inner = model_judge(judge)
    template = inner.template_facts()[0] != template_fingerprint(None)  # a judge's remembered facts
    system = inner.system_prompt
    note = (
        "the model's chat template, as the judge applied it (format_chat)"
        if template
        else "plain text: no chat template (model.chat_template=false or a tokenizer without one)"
    )
    note += (
        f"; system prompt {system!r}" if system else "; no system prompt set (the template may add its own)"
    )
    return ChatView(inner.format_prompt, note)  # the judge's own wrapping: the text it encoded


def api_view(endpoint: str, system_prompt: str | None) -> ChatView:
    """An API judge: the messages it sent (the server applies its own chat template, unknown here)."""
    if endpoint == "completions":
        return ChatView(lambda message: message, "sent raw to the server's /completions endpoint")

    def messages(message: str) -> str:
        head = f"[system]\n{system_prompt}\n\n" if system_prompt else ""
        return f"{head}[user]\n{message}"

    return ChatView(
        messages,
        "the chat messages sent to the server's /chat/completions; the server wrapped them "
        "in its own chat template, which is not known here",
    )


def judge_view(judge: Any) -> ChatView:
    """The view of a judge built by the run (no weights are loaded)."""
    inner = model_judge(judge)
    if hasattr(inner, "endpoint"):
        return api_view(inner.endpoint, inner.system_prompt)
    if isinstance(inner, ChatPrompts):  # not hasattr(.., "tokenizer"): that would load it
        return local_view(inner)
    return ChatView(
        None, f"the judge {type(inner).__name__} keeps no chat template: the user message is shown"
    )


class Wrapping(ChatPrompts):
    """The judges' chat layer alone (harness.judges.chat): a tokenizer and the model's chat
    settings, as every local judge (hf or vLLM) holds them; no judge is built, no weights loaded."""

    def __init__(self, tokenizer: Any, settings: ModelSettings) -> None:
        self.tokenizer = tokenizer
        self.set_chat(settings)


def config_view(config: Mapping[str, Any]) -> ChatView:
    """The view of a finished run from its config.json: the model's tokenizer, loaded again (never
    a judge, nor its weights); the user message alone, with the reason, when the model is not
    available here."""
    model, backend = config.get("model") or {}, config.get("backend") or {}
    if backend.get("name") == "api":
        return api_view(str(backend.get("endpoint") or "chat"), model.get("system_prompt"))
    try:
        settings = from_config(ModelSettings, model)
        path, gguf = resolve_model_path(str(model["path"]), model.get("gguf_file"))
        tokenizer = load_tokenizer(path, gguf, settings.revision, bool(settings.trust_remote_code))
        return local_view(Wrapping(tokenizer, settings))
    except Exception as e:  # a missing model folder, a gated tokenizer: the page still renders  # noqa: BLE001
        return ChatView(
            None,
            f"the chat wrapping could not be rebuilt ({type(e).__name__}: "
            f"{str(e).splitlines()[0][:200] if str(e) else 'no message'}): the user message is shown",
        )


def texts(doc: Document, a: str, b: str) -> dict[str, str]:
    """A pair's slot values."""
    return {
        "source": doc.source,
        "context": doc.context,
        "a": doc.candidate(a).text,
        "b": doc.candidate(b).text,
    }


def fill(skeleton: str, values: Mapping[str, str]) -> str:
    """The skeleton with every marker replaced by its slot's text (what report.js does)."""
    return MARK.sub(lambda m: values[m.group(1)], skeleton)


def skeleton(view: ChatView, instruction: str, family: str, with_context: bool) -> str:
    """The wrapped user message with markers in its text slots."""
    cands = (Candidate("a", marker("a")), Candidate("b", marker("b")))
    doc = Document("skeleton", marker("source"), cands, context=marker("context") if with_context else "")
    message = render(doc, cands[0], cands[1], instruction, family)
    return view.wrap(message) if view.wrap is not None else message


@dataclass(frozen=True)
class PromptPlan:
    """What the page needs to show every pair's prompt of one judged set."""

    skeletons: dict[str, str]
    """"plain" (and "context" when a document has context) -> skeleton."""
    exact: dict[str, str]
    """"<doc>\\t<a>\\t<b>" -> the exact prompt, only for pairs the skeleton does not reproduce."""
    note: str


def plan(
    view: ChatView,
    instruction: str,
    family: str,
    docs: Mapping[str, Document],
    pairs: Sequence[tuple[str, str, str]],
) -> PromptPlan:
    """Skeletons for `pairs` (doc id, A id, B id), each pair checked against its real prompt."""
    skel = {"plain": skeleton(view, instruction, family, False)}
    if any(docs[d].context for d, _, _ in pairs):
        skel["context"] = skeleton(view, instruction, family, True)
    exact = {}
    for d, a, b in pairs:
        doc = docs[d]
        message = render(doc, doc.candidate(a), doc.candidate(b), instruction, family)
        real = view.wrap(message) if view.wrap is not None else message
        values = texts(doc, a, b)
        if (
            any(MARK.search(v) for v in values.values())
            or fill(skel["context" if doc.context else "plain"], values) != real
        ):
            exact[f"{d}\t{a}\t{b}"] = real
    return PromptPlan(skel, exact, view.note)
