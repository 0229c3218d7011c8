"""Figures 2-4 as the paper computes them, fed with real judgments: the sensitivity experiment on
the real-vocab tiny models (tiny:llama3, tiny:mistral7b) judging real NewsRoom documents under the
official prompt format, then Figure 2's box plot across both models (scripts/paper_figures.py)."""

from __future__ import annotations

import importlib.util
import json
import math

import pytest
from helpers import REPO
from helpers.compose import compose

from harness.metrics import permutation_debias, upper_a_rate

pytestmark = pytest.mark.usefixtures("one_thread")


def _instructions(shared_data) -> list[str]:
    from harness.prompts import load_zepo_instructions

    raw = load_zepo_instructions(shared_data / "zepo" / "init_prompts.json", raw=True)["coherence"]
    return [
        raw,
        " ".join(raw.split()),
        "Which summary candidate has better coherence? If the candidate A is better, please return 'A'. "
        "If the candidate B is better, please return 'B'. You must return the choice only.",
        "Compare the two summaries for coherence: logical flow and clarity. Return 'A' or 'B' only.",
        "Read the source text, then decide which summary candidate is more coherent. Answer A or B.",
    ]


@pytest.fixture(scope="module")
def studies(tmp_path_factory, shared_data):
    from harness.runtime.entry import run

    tmp = tmp_path_factory.mktemp("figures")
    lines = tmp / "instructions.txt"
    lines.write_text("\n".join(t.replace("\n", " ") for t in _instructions(shared_data)) + "\n")
    out = {}
    for model in ("tiny_llama3", "tiny_mistral7b"):
        cfg = compose(
            [
                "experiment=sensitivity",
                f"model={model}",
                "model.chat_format=zepo",
                "task=newsroom",
                "task.format=zepo",
                "task.aspect=coherence",
                "task.offset=28",
                "task.docs=2",
                "task.max_candidates=4",
                f"experiment.from_file={lines}",
                "experiment.shuffles=10",
                f"data.dir={tmp / 'data'}",
                f"data.mirror={shared_data}",
                f"cache.path={tmp / 'cache' / 'requests.sqlite'}",
                "progress=false",
                "wandb.mode=disabled",
            ]
        )
        run_dir = tmp / "multirun" / model
        out[model] = (run_dir, run(cfg, run_dir))
    return tmp, out


def test_figure4_debiased_rate_is_the_official_one_and_varies(studies):
    _, out = studies
    for run_dir, res in out.values():
        rows = [json.loads(x) for x in (run_dir / "sensitivity.jsonl").read_text().splitlines()]
        upper = [r["permutation"]["a_rate_upper"] for r in rows]
        # Negative control: the old x-axis, the rate over all pairs of a debiased matrix, is always 0.5.
        assert all(r["permutation"]["a_rate"] == 0.5 for r in rows)
        assert len(set(upper)) > 1 and any(abs(u - 0.5) > 0.01 for u in upper)
        # The debiased points spread along x, so their correlation with Spearman is defined.
        assert math.isfinite(res["analysis"]["permutation"]["rate_vs_spearman"]["rho"])
        fair = [-abs(u - 0.5) for u in upper]
        assert len(set(fair)) > 1  # the debiased fairness (official --do_permutate) varies too
        assert (run_dir / res["figures"]["fig4_debias"]).stat().st_size > 0 and res["n_instructions"] == 5


def test_figure3_uses_the_label_free_bc_prior_with_spearman_rho(studies):
    _, out = studies
    for run_dir, res in out.values():
        rows = [json.loads(x) for x in (run_dir / "sensitivity.jsonl").read_text().splitlines()]
        assert all(math.isfinite(r["none"]["bc"]) and r["none"]["bc"] >= 0 for r in rows)
        assert len({r["none"]["bc"] for r in rows}) > 1
        a = res["analysis"]["none"]
        for name in ("fairness", "confidence", "calibration", "calibration_ece"):
            assert set(a["spearman_with_spearman"][name]) == {"rho", "p", "n"}
        rho = a["spearman_with_spearman"]["calibration"]["rho"]
        assert math.isnan(rho) or -1 <= rho <= 1


def test_upper_rate_recomputed_from_judgments(studies, shared_data):
    """One instruction re-judged outside the study: the same official upper-triangle rate."""
    from harness.data import load_task
    from harness.judges.hf import HFJudge
    from harness.judging import judge_documents
    from harness.models.tiny import ensure_tiny_model

    _, out = studies
    run_dir, _ = out["tiny_llama3"]
    judge = HFJudge(ensure_tiny_model("llama3"), device="cpu", chat_format="zepo")
    docs = load_task("newsroom", shared_data, limit=30, fmt="zepo")[28:30]
    text = _instructions(shared_data)[2]
    js, _ = judge_documents(
        judge,
        docs,
        aspect="coherence",
        instruction=text,
        family="summarization",
        max_candidates=4,
        progress=False,
    )
    row = [json.loads(x) for x in (run_dir / "sensitivity.jsonl").read_text().splitlines()][2]
    assert upper_a_rate(permutation_debias(js)) == pytest.approx(row["permutation"]["a_rate_upper"])


def test_figure2_box_plot_across_models(studies, tmp_path):
    tmp, out = studies
    spec = importlib.util.spec_from_file_location("paper_figures", REPO / "scripts" / "paper_figures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    png = tmp_path / "fig2.png"
    assert mod.main([str(tmp / "multirun"), "--out", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    groups = json.loads(png.with_suffix(".json").read_text())
    assert set(groups) == {"tiny-llama3", "tiny-mistral7b"} and all(len(v) == 5 for v in groups.values())
    rows = [json.loads(x) for x in (out["tiny_llama3"][0] / "sensitivity.jsonl").read_text().splitlines()]
    assert groups["tiny-llama3"] == [r["none"]["spearman_pairs"] for r in rows]
    for run_dir, res in out.values():  # each run's own Figure 2 holds its box beside the scatter
        assert (run_dir / res["figures"]["fig2_spearman_vs_rate"]).stat().st_size > 0
    assert mod.main([str(tmp_path / "none")]) == 2


def _rows(run_dir):
    return [json.loads(x) for x in (run_dir / "sensitivity.jsonl").read_text().splitlines()]


def _overlapping_titles(fig) -> list[tuple[str, str]]:
    """Pairs of panel titles whose drawn boxes intersect."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # Agg (harness.figures.pyplot)
    boxes = [
        (ax.title.get_text(), ax.title.get_window_extent(renderer)) for ax in fig.axes if ax.title.get_text()
    ]
    return [(a, b) for i, (a, ba) in enumerate(boxes) for b, bb in boxes[i + 1 :] if ba.overlaps(bb)]


def test_figure3_panel_titles_do_not_overlap(studies):
    """Figure 3 with the study's panel names: no two panel titles overlap, for the study's own rows
    and for 20 paraphrases whose rho and p print in full (the case that overlapped). Negative
    control: the old one-line titles on the same figure do."""
    import numpy as np

    from harness.figures import pyplot
    from harness.zepo import figure3, plots

    _, out = studies
    run_dir, _ = next(iter(out.values()))
    rows = _rows(run_dir)
    obj = figure3.objective_values(rows)
    rng = np.random.default_rng(0)
    full = {name: rng.uniform(-1, 0, 20) for name in figure3.FIGURE3}
    for values, sp, control in (
        ({k: obj[k] for k in figure3.FIGURE3}, [r["none"]["spearman_pairs"] for r in rows], False),
        (full, rng.uniform(0.2, 0.45, 20), True),
    ):
        fig = plots.objectives_figure(
            {v: values[k] for k, v in figure3.FIGURE3.items()},
            sp,
            "newsroom/coherence",
            needs_labels=(figure3.FIGURE3["calibration_ece"],),
        )
        try:
            assert len([ax for ax in fig.axes if ax.title.get_text()]) == 4
            assert _overlapping_titles(fig) == []
            if control:  # every rho and p printed in full, on one line as before
                for ax in fig.axes:
                    ax.set_title(ax.title.get_text().replace("\n", ": "), fontsize=10)
                assert _overlapping_titles(fig), "the negative control should overlap"
        finally:
            pyplot().close(fig)


def test_figure4_colours_and_curves_match_the_paper(studies):
    """Figure 4 as the paper: raw pairwise red, debiased blue (the study's rows), and each group
    its own fitted curve in its colour (20 paraphrases with distinct decision rates: the tiny
    models' few distinct rates get no curve)."""
    import numpy as np
    from matplotlib.colors import to_rgba

    from harness.figures import pyplot
    from harness.zepo import figure3, plots

    _, out = studies
    run_dir, _ = next(iter(out.values()))
    rows = _rows(run_dir)
    red, blue = to_rgba(plots.RAW_COLOUR), to_rgba(plots.DEBIASED_COLOUR)
    rng = np.random.default_rng(1)
    synthetic = (
        rng.uniform(0.2, 0.9, 20),
        rng.uniform(0.2, 0.4, 20),
        rng.uniform(0.35, 0.7, 20),
        rng.uniform(0.35, 0.5, 20),
    )
    study_rows = (
        figure3.decision_rates(rows, "none"),
        [r["none"]["spearman_pairs"] for r in rows],
        figure3.decision_rates(rows, "permutation"),
        [r["permutation"]["spearman_pairs"] for r in rows],
    )
    for data, curves_expected in ((study_rows, None), (synthetic, {red, blue})):
        fig = plots.debias_figure(*data)
        try:
            ax = fig.axes[0]
            colour = {c.get_label(): tuple(c.get_facecolor()[0][:3]) for c in ax.collections}
            assert colour == {"pairwise (raw)": red[:3], "permutation debiased": blue[:3]}
            # Negative control: the previous colours (raw C0 = blue, debiased C1 = orange) differ.
            assert (
                colour["pairwise (raw)"] != to_rgba("C0")[:3]
                and colour["permutation debiased"] != to_rgba("C1")[:3]
            )
            curves = {to_rgba(line.get_color()) for line in ax.get_lines() if len(line.get_xdata()) > 2}
            if curves_expected is not None:
                assert curves == curves_expected
        finally:
            pyplot().close(fig)
