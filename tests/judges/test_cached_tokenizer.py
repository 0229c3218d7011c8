"""A fully cached transformers judge loads no tokenizer (issue #52: the fixed cost of a cached run).

What the judge's identity reads of its tokenizer (answer-token ids, padding id, the chat template's
and its own system text's fingerprints) and how the template wraps a user message (for the report
page) are remembered per tokenizer folder (its files' digests) and settings in
`tokenizer_facts.json`; a later process builds the judge, its identity and the page's prompt
skeleton from them, and loads the tokenizer (importing transformers) only when a prompt must be
tokenized. Each is checked against the real tokenizer, with negative controls.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent("""
    import json, sys
    from harness.judges.hf import HFJudge
    from harness.records import PairRequest
    from harness.report.prompt import judge_view, skeleton
    judge = HFJudge(sys.argv[1], device="cpu", threads=1, system_prompt=sys.argv[2] or None)
    requests = [PairRequest("d", "a", "b", "Which summary is better? Answer A or B.")]
    assert list(judge.stream_scores(requests, needed=[])) == []  # all cached: nothing to compute
    view = judge_view(judge)
    page = skeleton(view, "Which is better?", "summarization", False)
    wrapped = judge.format_prompt("  Source: x\\n\\nWhich is better? \\u00e9 ")
    heavy = ["torch", "transformers", "tokenizers"]
    print(json.dumps({"identity": judge.identity, "answers": judge.answers.describe(), "pad": judge.pad_id,
                      "page": page, "note": view.note, "wrapped": wrapped,
                      "imported": [m for m in heavy if m in sys.modules]}))
""")


def _probe(folder: Path, cache: Path, system: str = "") -> dict:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(Path.home()),
        "HARNESS_MODEL_CACHE": str(cache),
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
    }
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(folder), system],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_cached_judge_loads_no_tokenizer_once_its_facts_are_remembered(tiny_llama, tmp_path):
    """First process (cold): the tokenizer loads (transformers imported: the negative control) and
    its facts are kept. Second: nothing of transformers or tokenizers is imported, and the identity,
    answer ids, padding id, the page's skeleton and a wrapped message (whitespace trimmed as the
    template does, non-ASCII) are the real tokenizer's. Another system prompt is another record: the
    tokenizer loads again."""
    from harness.judges.hf import HFJudge
    from harness.judges.weights import load_tokenizer
    from harness.report.prompt import judge_view, skeleton

    cache = tmp_path / "models"
    cold = _probe(tiny_llama, cache)
    assert "transformers" in cold["imported"] and (cache / "tokenizer_facts.json").is_file()
    warm = _probe(tiny_llama, cache)
    assert warm["imported"] == []
    real = HFJudge(tiny_llama, device="cpu", threads=1, tokenizer=load_tokenizer(tiny_llama))
    view = judge_view(real)  # wrapped by the tokenizer itself
    want = {
        "identity": real.identity,
        "answers": real.answers.describe(),
        "pad": real.pad_id,
        "page": skeleton(view, "Which is better?", "summarization", False),
        "note": view.note,
        "wrapped": real.format_prompt("  Source: x\n\nWhich is better? \u00e9 "),
    }
    assert {k: warm[k] for k in want} == want == {k: cold[k] for k in want}
    other = _probe(tiny_llama, cache, system="Be fair.")
    assert "transformers" in other["imported"] and other["identity"] != want["identity"]


def test_a_template_that_rewrites_the_message_is_not_remembered_as_a_wrapping(tiny_llama):
    """Negative control of the remembered wrapping: a template that changes the message (upper
    case) is neither prefix + message + suffix nor its trimmed form, so no wrapping is kept."""
    from harness.judges.hf import HFJudge
    from harness.judges.weights import load_tokenizer

    judge = HFJudge(tiny_llama, device="cpu", threads=1, tokenizer=load_tokenizer(tiny_llama))
    assert judge._learn_wrap() is not None
    judge.tokenizer.chat_template = "<<{{ messages[0]['content'] | upper }}>>"
    assert judge._learn_wrap() is None
