"""Seeded sampling from a local transformers model (LocalOptimizer's paraphrases): one generator
per sample, so each reply depends on its own seed only, never on the batch it ran in."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.progress import show_step


def turn_end_ids(model: Any, tokenizer: Any) -> set[int]:
    """Token ids that end the optimizer's reply: every eos id of the model, its generation config
    and its tokenizer, plus ChatML's <|im_end|> where the vocabulary has it."""
    ids: set[int] = set()
    for src in (getattr(model, "generation_config", None), model.config, tokenizer):
        v = getattr(src, "eos_token_id", None)
        ids.update(v if isinstance(v, (list, tuple)) else [v] if v is not None else [])
    end = tokenizer.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in tokenizer.get_vocab() else None
    if end is not None:
        ids.add(int(end))  # ChatML templates end a turn with <|im_end|> even when eos is another token
    return {int(i) for i in ids}


def sample_tokens(
    model: Any,
    prompt: Sequence[int],
    seeds: Sequence[int],
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    stop_ids: set[int],
    progress: Any = None,
) -> list[list[int]]:
    """Sample one continuation per seed (rows share the prompt, so no padding is needed).

    Each row draws from its own CPU torch.Generator, so a sample depends only on its seed,
    never on the global RNG or on what else was in the batch. Stop tokens are not returned.
    `progress` (a tqdm bar) is ticked once per row as it stops (or runs out of tokens), with the
    decoding step in its postfix: a local optimizer's replies take minutes on a CPU.
    """
    import torch

    n = len(seeds)
    if n == 0:
        return []
    device = next(model.parameters()).device
    gens = [torch.Generator(device="cpu").manual_seed(int(s)) for s in seeds]
    out: list[list[int]] = [[] for _ in range(n)]
    done = [False] * n
    inp = torch.tensor([list(prompt)] * n, dtype=torch.long, device=device)
    past, finished = None, 0
    with torch.inference_mode():
        for step in range(max_new_tokens):
            res = model(input_ids=inp, past_key_values=past, use_cache=True)
            past = res.past_key_values
            logits = res.logits[:, -1, :].float().cpu()
            nxt = [_draw(logits[r], temperature, top_p, gens[r]) for r in range(n)]
            for r, tok in enumerate(nxt):
                if not done[r]:
                    if tok in stop_ids:
                        done[r] = True
                    else:
                        out[r].append(tok)
            if progress is not None:
                show_step(progress, step + 1, max_new_tokens)
                if sum(done) > finished:
                    progress.update(sum(done) - finished)
                    finished = sum(done)
            if all(done):
                break
            inp = torch.tensor(nxt, dtype=torch.long, device=device).unsqueeze(1)
    if progress is not None and n > finished:
        progress.update(n - finished)  # the rows that ran out of tokens
    return out


def _draw(logits, temperature: float, top_p: float, gen) -> int:
    import torch

    if temperature <= 0:
        return int(logits.argmax())
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(descending=True)
        keep = sorted_p.cumsum(-1) - sorted_p < top_p  # always keeps the most likely token
        probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_p[keep])
    return int(torch.multinomial(probs, 1, generator=gen))
