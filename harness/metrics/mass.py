"""Answer mass: how much of the judge's next-token probability its answer tokens hold.

P(A) is renormalised over the answer tokens, so it looks like a fine probability even when the
judge puts almost nothing on 'A' or 'B' (a base model, a missing chat template, a prompt that does
not end where the answer starts). The mass before renormalising, summed over every variant of
every label ('A', ' A', 'B', ' B'), is already in each Judgment's token_logprobs; no model call
is needed. Threshold and why: harness.judging.MIN_ANSWER_MASS.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from harness.judging import MIN_ANSWER_MASS, answer_mass
from harness.records import Judgment


def answer_masses(judgments: Sequence[Judgment]) -> np.ndarray:
    """The answer mass of every read judgment, in order: 0 where the judge wrote no answer token
    (`no_answer`, flagged low_answer_mass too); an `unreadable` one (an API answer that stayed
    spoiled) has no reading and is left out, as it is left out of the low_answer_mass flags."""
    return np.array(
        [answer_mass(j.token_logprobs) for j in judgments if "unreadable" not in j.flags], dtype=float
    )


def answer_mass_stats(judgments: Sequence[Judgment], threshold: float = MIN_ANSWER_MASS) -> dict[str, float]:
    """Median answer mass and the share of read judgments below `threshold` (NaN when none)."""
    return answer_mass_stats_of(answer_masses(judgments), threshold)


def answer_mass_stats_of(m: np.ndarray, threshold: float = MIN_ANSWER_MASS) -> dict[str, float]:
    """`answer_mass_stats` of the masses of the read judgments."""
    if not m.size:
        return {"answer_mass_median": math.nan, "answer_mass_low_share": math.nan}
    return {"answer_mass_median": float(np.median(m)), "answer_mass_low_share": float((m < threshold).mean())}
