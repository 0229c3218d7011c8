"""The official ZEPO read-out: generate greedily, then read the answer where the model wrote it.

The ZEPO code (cambridgeltl/zepo @ 0c3940a, `models/llama3.py:119-180`, `models/mistral.py:88-140`)
does not read the next-token distribution after the prompt. It calls `model.generate` greedily
(`do_sample=False`, up to 32 new tokens, `pad_token_id` = eos, raw `output_logits`), walks the
generated tokens, and at the FIRST one that is an A or B variant takes the softmax over the whole
vocabulary at that step; if no A/B token is generated the pair scores 0.5. For Llama-3, whose
prompt it wraps without the assistant header, the model first writes the header itself, so the
answer is usually read at step 4; for Mistral usually at step 0.

`generate_answer_logprobs` does the same with transformers' own `generate` on left-padded batches
(the official call), returning for each prompt the answer-token log-probabilities at that step
and the step, or None where no trigger token was generated. Given a progress bar, it ticks each
prompt as its answer is settled (its first trigger or stop token), inside the batch, and shows the
decoding step: a batch of an 8B judge generates for minutes, and a bar that moved only when a
whole call returned sat at 0 for all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.judges.head import FloatHead
from harness.progress import show_step


@dataclass(frozen=True)
class GeneratedAnswer:
    """What greedy generation gave for one prompt."""

    logprobs: list[float] | None
    """Full-vocabulary log-softmax of the answer ids at the answer step; None when no trigger
    token (an A/B variant) was generated within the budget."""
    step: int | None
    """Index among the generated tokens of the answer step (0 = right after the prompt)."""
    tokens: list[int]
    """The generated token ids (eos and what follows it left out)."""


class AnswerTicker:
    """A `generate` streamer that ticks `progress` once per row, at the step its answer is settled:
    the first trigger (A/B) token, or a stop token before any (then it has none). generate hands
    a streamer the prompt first, then each step's tokens, one per row."""

    def __init__(self, rows: int, settling: set[int], progress: Any, max_new_tokens: int) -> None:
        self.open = set(range(rows))
        self.settling, self.progress, self.max_new_tokens = settling, progress, max_new_tokens
        self.steps = -1  # the first put is the prompt

    def put(self, tokens: Any) -> None:
        self.steps += 1
        settled = (
            []
            if self.steps == 0
            else [r for r, t in enumerate(tokens.view(-1).tolist()) if r in self.open and t in self.settling]
        )
        self.open.difference_update(settled)
        show_step(self.progress, self.steps, self.max_new_tokens)
        if settled:
            self.progress.update(len(settled))

    def end(self) -> None:
        """Rows still open at the end (no trigger within the budget) are settled now."""
        if self.open:
            self.progress.update(len(self.open))
        self.open.clear()


def generate_answer_logprobs(
    model: Any,
    rows: Sequence[Sequence[int]],
    answer_ids: Sequence[int],
    trigger_ids: set[int],
    *,
    max_new_tokens: int,
    pad_id: int,
    batch_size: int,
    progress: Any = None,
    head: FloatHead | None = None,
) -> list[GeneratedAnswer]:
    """Greedy `generate` per batch (left padding, pad = `pad_id`), then the official scan;
    `progress` (a tqdm bar) is ticked once per row as its answer is settled (AnswerTicker).
    The answer's log-probs come from float32 logits whatever the model's dtype (`head`,
    harness.judges.head; the greedy choice of tokens stays the model's own)."""
    head = head if head is not None else FloatHead(model)
    out: list[GeneratedAnswer] = []
    for start in range(0, len(rows), batch_size):
        part = rows[start : start + batch_size]
        ticker = (
            None
            if progress is None
            else AnswerTicker(len(part), set(trigger_ids) | _stop_ids(model), progress, max_new_tokens)
        )
        out.extend(
            _generate_batch(model, part, answer_ids, trigger_ids, max_new_tokens, pad_id, ticker, head)
        )
        if ticker is not None:
            ticker.end()  # generate calls end() itself; again here is a no-op, and safe if it did not
    return out


def _generate_batch(
    model: Any,
    rows: Sequence[Sequence[int]],
    answer_ids: Sequence[int],
    trigger_ids: set[int],
    max_new_tokens: int,
    pad_id: int,
    streamer: Any = None,
    head: FloatHead | None = None,
) -> list[GeneratedAnswer]:
    import torch

    device = next(model.parameters()).device
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for k, r in enumerate(rows):
        input_ids[k, width - len(r) :] = torch.tensor(list(r), dtype=torch.long)
        mask[k, width - len(r) :] = 1
    head = head if head is not None else FloatHead(model)
    with torch.inference_mode(), head.capture() as hidden:  # one last-position state per step
        gen = model.generate(
            input_ids=input_ids.to(device),
            attention_mask=mask.to(device),
            max_new_tokens=int(max_new_tokens),
            do_sample=False,
            temperature=None,
            top_p=None,
            top_k=None,
            pad_token_id=int(pad_id),
            output_logits=True,
            return_dict_in_generate=True,
            streamer=streamer,
        )
    if head.upcast and len(hidden) != len(gen.logits):
        raise RuntimeError(
            f"generate ran {len(hidden)} forwards for {len(gen.logits)} steps: the float32 "
            f"read-out cannot tell which hidden state is which step's"
        )
    new = gen.sequences[:, width:].cpu().tolist()
    index = torch.tensor(list(answer_ids), device=gen.logits[0].device)
    stops = _stop_ids(model)
    out = []
    for k, seq in enumerate(new):
        step = next((i for i, t in enumerate(seq) if t in trigger_ids), None)
        kept = []
        for t in seq:
            if t in stops:
                break
            kept.append(t)
        if step is None or step >= len(gen.logits):
            out.append(GeneratedAnswer(None, None, kept))
            continue
        logits = head.read(hidden[step][k : k + 1] if head.upcast else None, gen.logits[step][k : k + 1])[0]
        logp = torch.log_softmax(logits.float(), dim=-1)[index]
        out.append(GeneratedAnswer(logp.cpu().tolist(), step, kept))
    return out


def _stop_ids(model: Any) -> set[int]:
    ids: set[int] = set()
    for src in (getattr(model, "generation_config", None), model.config):
        v = getattr(src, "eos_token_id", None)
        ids.update(v if isinstance(v, (list, tuple)) else [v] if v is not None else [])
    return {int(i) for i in ids}
