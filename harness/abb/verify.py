"""A-BB check and record: claim-aware fresh-neighbour verification, abb.json's core, run_abb.

Each claim kind says what its check tests (`Verification.tests`):
- sure (the certain cap at sigma = 0: delta_claimed = 0): the claim's only assumption, on EVERY fresh
  neighbour: ||g(f(D)) - g(f(D'))|| <= alpha sqrt(B) (scores within the scale) and no neighbour moved
  more coordinates than the mode allows; one counterexample refutes it, no rate is estimated;
- rate (a data-driven bound, or noise): count ||M(D) - M(D')|| > tau over neighbours NOT used for
  estimation, ONE fresh noise pair per neighbour (independent Bernoulli trials, so Clopper-Pearson
  applies), against the delta actually claimed (delta_m of the winner + the noise tail); the sure
  bound's assumption is checked as well;
- context (jitter removed: a claim about the judge's MEAN score) and none (the DP variant, no tau
  claim): single raw re-judgments do not test it, so the verdict is not_applicable unless the sure
  bound's assumption (which every bound uses) broke.
Verdicts (one-sided CP at 95%, in this order): violated (an assumption broke, a sure claim had a
counterexample, or cp_low > delta_claimed) / not_applicable / by_construction (sure, and the check
cannot fail: whole-set neighbours, B = d r^2, every score in [lo, hi] -- "holds by construction
(scores in [lo, hi])", not `confirmed`) / confirmed (sure: every fresh neighbour met the assumption)
/ vacuous (rate claim no judge within the scale could push above delta_claimed)
/ confirmed (cp_high <= delta_claimed) / inconclusive (too few trials). Every comparison uses the
bounds' own tolerance (`bounds.exceeds`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from harness.abb.bounds import (
    clopper_pearson,
    distance_bounds,
    exceeds,
    min_trials_to_confirm,
    noise_tail,
    squared_distances,
)
from harness.abb.bounds import config_error as _err
from harness.abb.certify import BOUNDS, choice_json, choose_alpha
from harness.abb.mechanism import (
    AbbParams,
    DeltaSplit,
    bounded_scores,
    calibrate,
    contract,
)
from harness.files import write_json_atomic

VERDICTS = ("violated", "vacuous", "confirmed", "inconclusive", "not_applicable", "by_construction")
TESTS = ("sure", "rate", "context", "none")
"""What a check tests, by claim kind (module docstring)."""


def verdict(
    violations: int, trials: int, delta_claimed: float | None, worst_case: float, confidence: float = 0.95
) -> tuple[str, float, float]:
    """(verdict, cp_low, cp_high) of a RATE claim, one-sided Clopper-Pearson; trials must be independent."""
    lo, hi = clopper_pearson(violations, trials, confidence, sided="one")
    if delta_claimed is None:
        return "not_applicable", lo, hi
    if lo > delta_claimed:  # checked first: a violation where none is possible exposes a wrong B
        return "violated", lo, hi
    if worst_case <= delta_claimed:
        return "vacuous", lo, hi
    return ("confirmed" if hi <= delta_claimed else "inconclusive"), lo, hi


def claim_tested(params: AbbParams) -> str:
    """sure | rate | context | none: what a fresh check of this mechanism's claim can test."""
    if params.kind == "dp" or params.delta_claimed is None:
        return "none"
    if params.choice.claim == "context":
        return "context"
    return "sure" if params.delta_claimed == 0 and params.sigma == 0 else "rate"


@dataclass(frozen=True)
class Verification:
    """What the fresh neighbours say about the claim (see the module docstring)."""

    trials: int
    """Fresh neighbours, one noise pair each: independent trials."""
    violations: int
    """Fresh neighbours with ||M(D) - M(D')|| > tau (one noise draw each)."""
    rate: float
    cp_low: float
    """One-sided lower Clopper-Pearson bound at `confidence`."""
    cp_high: float
    """One-sided upper Clopper-Pearson bound at `confidence`."""
    confidence: float
    delta_claimed: float | None
    """delta_m + noise tail of the mechanism checked (None: the DP variant makes no tau claim)."""
    worst_case: float
    """The largest violation probability ANY judge within the score scale could cause."""
    verdict: str
    """violated | vacuous | confirmed | inconclusive | not_applicable | by_construction."""
    min_trials: int | None
    """Fewest trials with 0 violations that could confirm delta_claimed."""
    unchanged: int
    """Fresh neighbours whose score vector did not move at all."""
    mean_distance: float
    max_distance: float
    checked: str
    """One sentence: what was counted and against what."""
    tests: str = "rate"
    """What this check tests: sure | rate | context | none (module docstring)."""
    assumption: dict | None = None
    """The sure bound's assumption on every fresh neighbour: {radius (alpha sqrt(B)), max_moved,
    beyond_radius (count), coords_allowed, max_coords, too_many_coords (count), held}."""
    could_show: str = ""
    """One sentence: what this check could and could not show."""
    verdict_text: str = ""
    """The verdict as the console and the tables print it: the verdict itself, or "holds by construction
    (scores in [lo, hi])" for by_construction."""


def _assumption(
    moved: np.ndarray, coords: np.ndarray, radius: float, allowed: int | None, mag: float
) -> dict:
    beyond = int(np.sum(exceeds(moved, radius, mag)))
    many = int(np.sum(coords > allowed)) if allowed is not None else 0
    return {
        "radius": radius,
        "max_moved": float(moved.max()),
        "beyond_radius": beyond,
        "coords_allowed": allowed,
        "max_coords": int(coords.max()),
        "too_many_coords": many,
        "held": beyond == 0 and many == 0,
    }


def _could_show(
    tests: str, worst: float, claimed: float | None, n: int, construction: str | None = None
) -> str:
    if construction:
        return (
            f"the claim {construction}: whole-set neighbours may move every coordinate and B = d r^2 "
            f"covers any scores in the scale, so no in-range judge could fail this check; the {n} fresh "
            "neighbours were looked at, but nothing about the judge was tested"
        )
    if tests == "sure":
        return (
            f"the claim holds surely if every neighbour keeps its scores in the scale and moves at most the "
            f"allowed coordinates; the check tested exactly that on {n} fresh neighbours: a counterexample "
            "would refute it, but no rate of bias is estimated (the claim does not depend on the judge)"
        )
    if tests == "context":
        return (
            "the claim is about the judge's MEAN score (jitter removed); single raw re-judgments do not test "
            "it, so only the sure bound's assumption was checked"
        )
    if tests == "none":
        return "the DP variant makes no tau claim; only the sure bound's assumption was checked"
    if worst <= (claimed or 0):
        return (
            f"no judge within the score scale could push the rate above delta_claimed={claimed:.3g} (worst case "
            f"{worst:.3g}), so only a broken assumption could fail it: the rate part says nothing"
        )
    need = min_trials_to_confirm(claimed) if claimed else None
    return (
        f"a violation rate above delta_claimed={claimed:.3g} shows once its Clopper-Pearson lower bound exceeds "
        f"it; confirming needs >= {need} fresh neighbours with no violation (here {n})"
    )


def by_construction(
    f: np.ndarray,
    fresh: np.ndarray,
    params: AbbParams,
    coords_allowed: int | None,
    scale: tuple[float, float] | None,
) -> bool:
    """True when a sure check cannot fail: every coordinate may move (whole set), B = d r^2, alpha sqrt(B)
    <= tau and every score lies in [lo, hi], so ||M(D) - M(D')|| <= tau for ANY in-range scores."""
    if scale is None or claim_tested(params) != "sure":
        return False
    lo, hi = float(scale[0]), float(scale[1])
    whole = coords_allowed is None or coords_allowed >= params.d
    full_b = not exceeds(
        params.d * (hi - lo) ** 2, params.B, params.B
    )  # B covers every coordinate's full range
    inside = bool(np.all((fresh >= lo) & (fresh <= hi)) and np.all((f >= lo) & (f <= hi)))
    return whole and full_b and inside and not exceeds(params.worst_radius(), params.tau)


def verify(
    baseline: np.ndarray,
    fresh: np.ndarray,
    params: AbbParams,
    rng: np.random.Generator,
    *,
    confidence: float = 0.95,
    coords_allowed: int | None = None,
    tests: str | None = None,
    scale: tuple[float, float] | None = None,
) -> Verification:
    """Check the claim on fresh neighbours, one fresh noise pair each (see the module docstring).

    coords_allowed: the most coordinates one neighbour may move (1 for one-item vs-baseline scores);
    None skips that part. scale: the score scale (lo, hi); with it, a sure check that cannot fail
    (`by_construction`) says so instead of `confirmed`.
    The same function checks a correctly calibrated mechanism and a negative
    control (e.g. `params` with alpha above its bound): the verdict depends only on `params`, the
    fresh vectors and the noise.
    """
    f = np.asarray(baseline, dtype=float)
    fresh = np.atleast_2d(np.asarray(fresh, dtype=float))
    if fresh.shape[1] != f.shape[0] or fresh.shape[0] < 1:
        raise _err(f"fresh neighbours have shape {fresh.shape} for d={f.shape[0]}", "verify")
    tests = tests or claim_tested(params)
    gf = contract(f, params)
    mag = float(np.max(np.abs(np.concatenate([f, fresh.ravel(), [params.mu_value or 0.0]]))))
    dists, moves = [], []
    for start in range(0, fresh.shape[0], 512):  # bounded memory for d ~ 10^4
        diff = gf - contract(fresh[start : start + 512], params)
        moves.append(np.linalg.norm(diff, axis=1))
        if params.sigma > 0:
            diff = diff + params.sigma * (rng.standard_normal(diff.shape) - rng.standard_normal(diff.shape))
        dists.append(np.linalg.norm(diff, axis=1))
    dist, moved = np.concatenate(dists), np.concatenate(moves)
    k, n = int(np.sum(exceeds(dist, params.tau, mag))), dist.size
    claimed = params.delta_claimed
    worst = noise_tail(params.worst_radius(), params.sigma, params.d, params.tau)
    v, lo, hi = verdict(k, n, claimed, worst, confidence)
    assume = _assumption(moved, np.sum(fresh != f, axis=1), params.worst_radius(), coords_allowed, mag)
    if not assume["held"] or (tests == "sure" and k > 0):
        v = "violated"
    elif tests in ("context", "none"):
        v = "not_applicable"
    elif tests == "sure":
        v = "by_construction" if by_construction(f, fresh, params, coords_allowed, scale) else "confirmed"
    text = f"holds by construction (scores in [{scale[0]:g}, {scale[1]:g}])" if v == "by_construction" else v
    what = (
        f"{k} of {n} fresh neighbours (one noise draw each) had ||M(D) - M(D')|| > {params.tau:.4g}; "
        f"{assume['beyond_radius']} moved beyond alpha sqrt(B) = {assume['radius']:.4g}"
        + (
            f" and {assume['too_many_coords']} moved more than {coords_allowed} coordinate(s)"
            if coords_allowed is not None
            else ""
        )
        + f"; claim tested: {tests}, one-sided {confidence:.0%} Clopper-Pearson [{lo:.3g}, {hi:.3g}] against "
        + (
            "delta_claimed=none (DP variant)"
            if claimed is None
            else f"delta_claimed={claimed:.3g}; worst case over all judges {worst:.3g}"
        )
    )
    return Verification(
        trials=n,
        violations=k,
        rate=k / n,
        cp_low=lo,
        cp_high=hi,
        confidence=confidence,
        delta_claimed=claimed,
        worst_case=worst,
        verdict=v,
        min_trials=min_trials_to_confirm(claimed, confidence) if claimed else None,
        unchanged=int(np.sum(np.all(fresh == f, axis=1))),
        mean_distance=float(dist.mean()),
        max_distance=float(dist.max()),
        checked=what,
        tests=tests,
        assumption=assume,
        could_show=_could_show(tests, worst, claimed, n, text if v == "by_construction" else None),
        verdict_text=text,
    )


# --- result record ---------------------------------------------------------------------------


def statement(p: AbbParams) -> str:
    """What the run claims, in words (an estimate and a missing certificate say so)."""
    c, win = p.choice, p.choice.winner
    if p.kind == "dp":
        return (
            f"DP-style: sigma={p.sigma:.4g} for epsilon={p.dp_epsilon} with sensitivity bound {p.radius:.4g} "
            f"(from {win.name}); the tau-distance claim is not made"
        )
    if p.kind == "none":
        return f"no certificate: {c.note}"
    who = (
        "the judge's MEAN score (jitter removed; a fresh check on single re-judgments does not test this)"
        if c.claim == "context"
        else "realised re-judgments (the judge's jitter included)"
    )
    bound = f"Pr_{{D',Z,Z'}}[||M(D) - M(D')|| > {p.tau:.4g}] <= {p.delta_claimed:.4g}"
    tail = f"alpha={p.alpha:.5g} from {win.name} (t={win.threshold:.4g})"
    if p.kind == "estimate":
        return f"estimate (no confidence bound): the plug-in suggests {bound} for {who}; {tail}; nothing is certified"
    if win.delta_est == 0 and p.delta_claimed == 0:
        return (
            f"surely: ||M(D) - M(D')|| <= {p.tau:.4g} for every neighbour whose scores stay in the scale "
            f"(alpha sqrt(B) = {p.worst_radius():.4g}); {tail}"
        )
    head = (
        "for any estimation data"
        if win.delta_est == 0
        else f"w.p. >= {1 - c.delta_est:.4g} over the estimation neighbours"
    )
    return f"{head}: {bound} for {who}; {tail}"


@dataclass(frozen=True)
class AbbResult:
    """Everything abb.json records about one calibrated, applied and (optionally) checked run."""

    params: AbbParams
    mode: str
    """"one_item" (Hamming-1), "whole_set", or "hamming_<k>" (a score file's Hamming-k claim, 1 < k < d)."""
    n_neighbours: int
    scale: tuple[float, float] | None
    verification: Verification | None = None

    def status(self) -> tuple[bool, str]:
        """(claimed, status): a guarantee is claimed only when certified and not refuted by its own check."""
        kind, v = self.params.kind, self.verification
        if kind == "certified" and v is not None and v.verdict == "violated":
            broke = v.assumption and not v.assumption["held"]
            why = (
                "the sure bound's assumption broke (a neighbour moved beyond alpha sqrt(B) or more coordinates "
                "than one neighbour may)"
                if broke
                else f"CP low {v.cp_low:.3g} > {v.delta_claimed:.3g}"
                if v.tests == "rate"
                else "a counterexample to a sure claim"
            )
            return False, (
                f"refuted: {v.violations}/{v.trials} fresh neighbours exceed tau; {why}; the claim, its "
                "1 - delta_est data event, or an assumption (i.i.d. neighbours, scores within the scale, "
                "one item per neighbour) failed"
            )
        return {
            "certified": (True, f"certified by {self.params.choice.winner.name}"),
            "estimate": (False, "estimate (no confidence bound)"),
            "none": (False, "no certificate (every estimation neighbour was a no-op)"),
            "dp": (False, "DP-style variant: no tau claim"),
        }[kind]

    def summary(self) -> str:
        """One plain sentence: what was proven, by what (cap / bound / data), and what the check could show."""
        p, v, win = self.params, self.verification, self.params.choice.winner
        if p.kind == "certified" and win.name == "certain_cap":
            proof = (
                f"proven without data by the certain cap: every neighbour moves ||f(D) - f(D')|| by at most "
                f"sqrt(B) = {p.B**0.5:.4g} when scores stay in the scale, so alpha = {p.alpha:.4g} keeps "
                f"||M(D) - M(D')|| <= {p.tau:.4g}"
                + (" surely" if p.delta_claimed == 0 else f" except w.p. {p.delta_claimed:.3g} (noise)")
            )
        elif p.kind == "certified":
            proof = (
                f"proven from {self.n_neighbours} estimation neighbours by the {win.name} bound: "
                f"Pr[||M(D) - M(D')|| > {p.tau:.4g}] <= {p.delta_claimed:.3g}, on an event of probability "
                f">= {1 - p.choice.delta_est:.4g} over those neighbours"
            )
        elif p.kind == "estimate":
            proof = "nothing is proven: the plug-in is an estimate (no confidence bound)"
        elif p.kind == "none":
            proof = "nothing is proven about T(D): every estimation neighbour was a no-op (the cap's alpha applied)"
        else:
            proof = "no tau claim is made (DP-style variant)"
        if v is None:
            check = "no fresh check was run (verify: 0)"
        else:
            check = (
                f"the fresh check ({v.tests}, {v.trials} neighbours) says {v.verdict_text or v.verdict}: "
                f"{v.could_show}"
            )
        units = ""
        if p.sigma == 0 and p.kind != "dp":
            units = (
                f"; at sigma = 0 this is a change of units, not a de-biasing: M(D) = {p.alpha:.4g} f(D) + "
                f"(1 - {p.alpha:.4g}) mu is an increasing affine map of the raw scores, so every ranking by score "
                "(and each flip between D and D') is exactly that of the raw scores"
            )
        return f"{proof}; {check}{units}."

    def to_json(self) -> dict:
        p = self.params
        claimed, status = self.status()
        return {
            "summary": self.summary(),
            "units": "raw judge score units throughout (tau, mu, sigma, thresholds)",
            "tau": p.tau,
            "delta": asdict(p.split),
            "d": p.d,
            "mode": self.mode,
            "scale": list(self.scale) if self.scale else None,
            "n_neighbours": self.n_neighbours,
            "alpha": p.alpha,
            "alpha_max": p.alpha_max,
            "mu": {"mode": p.mu_mode, "value": p.mu_value},
            "sigma": p.sigma,
            "sigma_max": p.sigma_max,
            "sigma_mode": p.sigma_mode,
            "bounds": {**choice_json(p.choice), "B": p.B, "B_parallel": p.B_parallel},
            "guarantee": {
                "kind": p.kind,
                "claim": p.choice.claim,
                "claimed": claimed,
                "status": status,
                "statement": statement(p),
                "certified_by": p.choice.winner.name if p.kind == "certified" else None,
                "radius": p.radius,
                "noise_tail": p.noise_tail if p.kind != "dp" else None,
                "delta_claimed": p.delta_claimed,
                "delta_est": p.choice.delta_est,
                "worst_case_radius": p.worst_radius(),
                "dp_epsilon": p.dp_epsilon,
                "noise_note": "noise never helps the distance claim; sigma = 0 has the most margin",
            },
            "verification": asdict(self.verification) if self.verification else None,
        }


def write_json(path: str | Path, data: dict) -> None:
    """Write abb.json atomically, creating the folder."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, data)


def run_abb(
    baseline: np.ndarray,
    neighbours: np.ndarray,
    *,
    tau: float,
    split: DeltaSplit,
    mode: str,
    scale: tuple[float, float],
    rng: np.random.Generator,
    allowed: tuple[str, ...] = BOUNDS,
    method: str = "best",
    intrinsic: np.ndarray | None = None,
    coords: tuple[int, int] | None = None,
    fresh: np.ndarray | None = None,
    bounds: tuple[float, float] | None = None,
    clip: tuple[float, float] | None = None,
    all_noop: bool = False,
    coords_allowed: int | None = None,
    **calibration,
) -> tuple[AbbResult, np.ndarray]:
    """The whole A-BB step: choose the bound, calibrate, apply M(D), verify on fresh neighbours.

    `neighbours` (m x d): f(D'_i) for estimation, i.i.d. from T(D); `intrinsic` (r x d): re-judgments of
    the UNCHANGED input on the coordinates a neighbour re-judges (the context claim; `coords` =
    (jitter coordinates, neighbour coordinates) per sample, which must match); `fresh` (n x d): held-out
    neighbours for the check; `coords_allowed`: the most coordinates one neighbour may move (checked on
    every fresh neighbour; None: not checked). `bounds` = (B, B_par) overrides `distance_bounds(mode, d, scale)`.
    `calibration` goes to `calibrate` (mu, mu_value, alpha, alpha_fraction, alpha_min, sigma_mode, ...).
    """
    f = np.asarray(baseline, dtype=float)
    d = f.shape[0]
    b, b_par = bounds if bounds is not None else distance_bounds(mode, d, scale)
    sq, par = squared_distances(f, neighbours)
    jitter = (
        {}
        if intrinsic is None
        else {
            "jitter_sq": squared_distances(f, intrinsic)[0],
            "jitter_coords": coords[0] if coords else None,
            "neighbour_coords": coords[1] if coords else None,
        }
    )
    data_mu = calibration.get("mu") == "data"
    choice = choose_alpha(
        tau,
        b,
        sq,
        delta_m=split.markov,
        delta_est=split.est,
        allowed=allowed,
        method=method,
        parallel_sq=par if data_mu else None,
        B_par=b_par,
        all_noop=all_noop,
        **jitter,
    )
    params = calibrate(choice, tau=tau, split=split, d=d, B=b, B_parallel=b_par, scale=scale, **calibration)
    scores = bounded_scores(f, params, rng, clip=clip)
    check = (
        verify(f, fresh, params, rng, coords_allowed=coords_allowed, scale=tuple(scale))
        if fresh is not None and len(fresh)
        else None
    )
    return AbbResult(params, mode, int(sq.size), tuple(scale), check), scores
