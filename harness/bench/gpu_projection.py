"""What `harness-bench gpu`'s 8B-shaped bench says about a whole run, and the tokenizer it carries.

- `save_llama3_tokenizer`: Llama-3-8B-Instruct's tokenizer as the harness builds it offline
  (harness.models.vocab), saved as a folder the device machine can carry, so the bench's prompts
  have the real judge's lengths.
- `projection`: SummEval's full run (every ordered pair of its 16 candidates, 100 documents) at each
  transformers path's measured prompts/s (the speed rows of the one-instruction workload), beside
  the compute floor of that run on one H200 (docs/benchmarks.md, "GPU": the trie's tokens through
  Llama-3-8B at the H200's bf16 rate; a desk estimate, not a measurement).
Imports torch, transformers and the harness only, as the device machine has them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.models.vocab import llama3_tokenizer

SUMMEVAL_PROMPTS = 100 * 16 * 15
"""SummEval's ordered pairs: 100 documents, 16 candidates each."""
FLOOR_S = (46.0, 58.0)
"""The compute floor of those prompts, Llama-3-8B on one H200, in seconds (docs/benchmarks.md, "GPU")."""
PATHS = {"prefix": "backend=hf as shipped (prefix reuse)", "batched": "one forward per prompt"}
"""The bench's transformers engines projected, and what each is."""
WORKLOAD = "1instr"
"""The speed workload projected: a judge run's prompts, one instruction."""
LLAMA3_TOKENIZER = "llama3-tok"
"""The carried tokenizer's folder, under the carry folder."""


def save_llama3_tokenizer(dest: Path) -> Path:
    """Llama-3-8B-Instruct's tokenizer (harness.models.vocab) saved into `dest`/llama3-tok."""
    folder = dest / LLAMA3_TOKENIZER
    llama3_tokenizer().save_pretrained(str(folder))
    return folder


def projection(rows: Mapping[str, Mapping[str, Any]], prompts: int = SUMMEVAL_PROMPTS) -> dict[str, Any]:
    """Each measured transformers path's wall time for `prompts` at its rate (`rows`: the speed
    bench's rows; a path not measured is left out), and the floor."""
    out = {}
    for row in rows.values():
        engine, rate = row.get("engine"), row.get("prompts_per_s")
        if (
            engine in PATHS
            and row.get("label") == engine
            and row.get("workload") == WORKLOAD
            and rate
            and engine not in out
        ):
            out[engine] = {
                "what": PATHS[engine],
                "row": row.get("name"),
                "prompts_per_s": rate,
                "projected_s": prompts / rate,
            }
    return {"prompts": prompts, "floor_s": list(FLOOR_S), "paths": out}


def projection_lines(proj: Mapping[str, Any]) -> list[str]:
    """One printed line per projected path."""
    low, high = proj["floor_s"]
    return [
        f"projection: {proj['prompts']:,} SummEval prompts at {row['prompts_per_s']:.1f} prompts/s ({name}, "
        f"{row['what']}): {row['projected_s']:,.0f} s; the compute floor on one H200: {low:.0f}-{high:.0f} s"
        for name, row in proj["paths"].items()
    ]
