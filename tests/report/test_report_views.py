"""report.html's views for a researcher's first questions, in headless Chromium (as
tests/report/test_report_page.py loads pages): the run's warnings, the documents view (candidates ranked by
win rate beside their human scores, each document's Spearman), find by exact id and by words of the
texts and prompts, the sort by most confident disagreement with the humans, each pair's answer-token
log-probs, a null gold shown as "no gold label", the layout at 800 and 1400 px, the link back to a
sweep's index, ZEPO's summary as a table and the pooled metrics' definitions.

The run is written by the harness's own writers without a model (harness.metrics.summary.write_run:
judgments.jsonl and results.json with every metric; harness.metrics.card.render_cards: the cards and
the low-answer-mass warning, logged in Hydra's run.log format) over designed documents: 12 documents
doc-1 ... doc-12 (so "doc-1" is a prefix of three other ids), whose judge agrees with the humans
except on doc-5, where it confidently reverses them. The prompts' chat wrapping is the API judge's
(harness.report.prompt.api_view), which needs no tokenizer.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
from pathlib import Path

import pytest
import yaml

from harness.bench.browser import Chromium, find_chromium
from harness.judging import load_judgments
from harness.metrics.card import render_cards
from harness.metrics.correlation import view_correlations, win_rates
from harness.metrics.settings import MetricsSettings
from harness.metrics.summary import write_run
from harness.metrics.views import document_views
from harness.records import Candidate, Document, Judgment
from harness.report.page import write_report
from harness.report.prompt import api_view

pytestmark = pytest.mark.skipif(
    find_chromium() is None,
    reason="chromium is not installed (Debian: apt-get install -y chromium; .ci/run installs it): "
    "the report page cannot be tested in a browser",
)

INSTRUCTION = "Which summary is more coherent? Answer A or B."
LONG_ID = "candidate-with-a-rather-long-identifier"
"""doc-12's third candidate: longer than its column at 800 px."""


def _documents() -> list[Document]:
    docs = []
    for n in range(1, 13):
        ids = ["c1", "c2", LONG_ID if n == 12 else "c3"]
        texts = [f"Summary {k} of document {n}: the council met on Tuesday." for k in (1, 2, 3)]
        if n == 7:
            texts[1] = "A zeppelin flew over the harbour, the second summary says."
        source = f"Source article {n} about the town council."
        if n == 3:
            source += " An aardvark was seen near the town hall."
        cands = tuple(
            Candidate(i, t, {"coherence": float(k + 1)}) for k, (i, t) in enumerate(zip(ids, texts))
        )
        docs.append(Document(f"doc-{n}", source, cands))
    return docs


def _judgments(docs: list[Document]) -> list[Judgment]:
    """P(A) = sigmoid(k (s_a - s_b)) from a strength per candidate: the human order (mildly) except on
    doc-5 (reversed, strongly); answer mass 0.1 (below the 0.2 threshold: the run's warning)."""
    out = []
    for doc in docs:
        k = -3.0 if doc.id == "doc-5" else 0.8
        rank = {c.id: r for r, c in enumerate(doc.candidates)}
        for a in doc.candidates:
            for b in doc.candidates:
                if a.id == b.id:
                    continue
                p = 1 / (1 + math.exp(-k * (rank[a.id] - rank[b.id]) - 0.1 * (doc.id == "doc-2")))
                mass = 0.1
                lp = {"A:A": math.log(0.7 * mass * p), "A: A": math.log(0.3 * mass * p)}
                lp |= {"B:B": math.log(0.7 * mass * (1 - p)), "B: B": math.log(0.3 * mass * (1 - p))}
                flags = ("low_answer_mass",)
                out.append(
                    Judgment(
                        doc.id, a.id, b.id, p, lp, a.scores["coherence"], b.scores["coherence"], None, flags
                    )
                )
    return out


def hydra_log(path: Path) -> logging.Handler:
    """A handler writing run.log as a run does: Hydra's own default job_logging format."""
    import hydra

    conf = Path(hydra.__file__).parent / "conf" / "hydra" / "job_logging" / "default.yaml"
    fmt = yaml.safe_load(conf.read_text())["formatters"]["simple"]["format"]
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter(fmt))
    return handler


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("views") / "run"
    out.mkdir()
    docs = _documents()
    write_run(
        out,
        _judgments(docs),
        0.5,
        task="jsonl",
        aspect="coherence",
        family="summarization",
        instruction=INSTRUCTION,
        judge_identity="designed judge (sigmoid of a strength per candidate)",
        n_docs=len(docs),
        shuffles=5,
        seed=0,
        metrics=MetricsSettings(20),
    )
    root = logging.getLogger()
    handler, level = hydra_log(out / "run.log"), root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        log = logging.getLogger("harness.test")
        log.info("an info line: not a warning")
        render_cards(out, echo=lambda _: None, metrics=MetricsSettings(0))  # logs the low-answer-mass warning
        for _ in range(2):
            log.warning("the same warning twice <b>not bold</b>")
        log.error("an error with a second line\nthe second line")
    finally:
        root.removeHandler(handler)
        handler.close()
        root.setLevel(level)
    write_report(out, docs, api_view("chat", "Be brief."))
    return out


@pytest.fixture(scope="module")
def browser():
    with Chromium(height=1000) as b:
        yield b


def _load(browser: Chromium, page: Path) -> None:
    got = browser.load(page)
    assert got.errors == [] and got.requests == []


ROWS = """Array.from(document.querySelectorAll('#pairs-body tr.pair')).map(tr =>
  Array.from(tr.querySelectorAll('td')).slice(0, 3).map(td => td.textContent.replace(/^[+\\u2212] /, '')))"""


def _find(browser: Chromium, query: str, where: str = "any") -> list[list[str]]:
    browser.evaluate(
        f"(() => {{ const q = document.getElementById('query'), w = document.getElementById('find-in');"
        f"w.value = {json.dumps(where)}; w.dispatchEvent(new Event('change'));"
        f"q.value = {json.dumps(query)}; q.dispatchEvent(new Event('input')); }})()"
    )
    return browser.evaluate(ROWS)


def test_the_runs_warnings_are_on_the_page(run, browser, tmp_path):
    """Every WARNING and ERROR record of run.log, once each with its count, as inert text; INFO
    lines are not warnings; a run without run.log says so."""
    _load(browser, run / "report.html")
    items = browser.evaluate(
        "Array.from(document.querySelectorAll('#warnings ~ ul.warnings li')).map(li => li.textContent)"
    )
    assert len(items) == 3, items
    assert "answer mass is low in run (median 0.1), below 0.2" in items[0]
    assert "the same warning twice <b>not bold</b>" in items[1] and "(2 times, first at" in items[1]
    assert items[2].startswith("error") and "the second line" in items[2]
    assert browser.evaluate("document.querySelectorAll('ul.warnings b').length") == 0
    assert "an info line" not in browser.evaluate("document.body.textContent")
    bare = tmp_path / "bare"
    shutil.copytree(run, bare, ignore=shutil.ignore_patterns("run.log", "report.html"))
    write_report(bare, None)
    _load(browser, bare / "report.html")
    text = browser.evaluate(
        "document.getElementById('warnings').nextElementSibling.nextElementSibling.textContent"
    )
    assert text == "no run.log in the run directory: the console's warnings are not shown"


def test_the_documents_view_ranks_by_win_rate_beside_the_human_scores(run, browser):
    """Each document's candidates in the order of the metrics' win rates, with their human scores; each
    document's Spearman and Kendall as harness.metrics.correlation computes them; their mean is
    results.json's spearman."""
    _load(browser, run / "report.html")
    judgments, _ = load_judgments(run / "judgments.jsonl")
    views = document_views(judgments)
    per_doc: dict[str, tuple[float, float]] = {}
    view_correlations(views, "winrate", 1, 0, per_doc)
    shown = browser.evaluate("""(() => { const out = {};
      const go = () => document.querySelectorAll('#docs-body tr.doc-row').forEach(tr => {
        out[tr.querySelector('td.doc .id').textContent] = {
          rho: tr.querySelector('td.rho').textContent, tau: tr.querySelector('td.tau').textContent,
          cands: Array.from(tr.querySelectorAll('tr.cand-rank')).map(r =>
            Array.from(r.children).map(td => td.textContent))}; });
      go(); document.getElementById('doc-next').click(); go(); return out; })()""")
    assert len(shown) == 12
    for doc_id, view in views.items():
        got = shown[doc_id]
        rates = win_rates(view.matrix)
        order = sorted(range(len(view.ids)), key=lambda c: -rates[c])
        assert [row[1] for row in got["cands"]] == [view.ids[c] for c in order]
        assert [row[2] for row in got["cands"]] == [f"{rates[c]:.4f}" for c in order]
        assert [float(row[3]) for row in got["cands"]] == [view.human[c] for c in order]
        rho, tau = per_doc[doc_id]
        assert (got["rho"], got["tau"]) == (f"{rho:.3f}", f"{tau:.3f}")
    assert shown["doc-5"]["rho"] == "-1.000" and shown["doc-1"]["rho"] == "1.000"
    spearman = json.loads((run / "results.json").read_text())["metrics"]["none"]["spearman"]
    summary = browser.evaluate("document.getElementById('docs-summary').textContent")
    assert (
        f"12 of 12 documents have two or more human-scored candidates: mean Spearman {spearman:.3f}"
        in summary
    )
    browser.evaluate(
        "document.getElementById('doc-sort').value = 'low'; document.getElementById('doc-sort')"
        ".dispatchEvent(new Event('change'))"
    )
    assert browser.evaluate("document.querySelector('#docs-body td.doc .id').textContent") == "doc-5"
    # "its pairs" shows that document's pairs, by exact id.
    browser.evaluate("document.querySelector('#docs-body button.show-pairs').click()")
    assert [r[0] for r in browser.evaluate(ROWS)] == ["doc-5"] * 3


def test_find_matches_ids_exactly_and_words_of_the_texts_and_prompts(run, browser):
    """'doc-1' is doc-1 only (not doc-10, doc-11, doc-12); several ids narrow to the rows holding all
    of them; a word of a candidate's text, of a source, and of the instruction or chat wrapping (in
    every prompt) finds the pairs whose prompts hold it; a word in no prompt finds nothing."""
    _load(browser, run / "report.html")
    assert {r[0] for r in _find(browser, "doc-1")} == {"doc-1"} and len(_find(browser, "doc-1")) == 3
    assert _find(browser, "doc-1 c2") == [["doc-1", "c1", "c2"], ["doc-1", "c2", "c3"]]
    assert _find(browser, "doc-1", "text") == []  # no text holds it
    assert _find(browser, "ZEPPELIN") == [["doc-7", "c1", "c2"], ["doc-7", "c2", "c3"]]
    assert _find(browser, "zeppelin", "id") == []
    assert {r[0] for r in _find(browser, "aardvark", "text")} == {"doc-3"}
    assert len(_find(browser, "more coherent")) == 36  # the instruction: in every prompt
    assert len(_find(browser, "be brief")) == 36  # the API judge's system message
    assert _find(browser, "no such words anywhere") == []


def test_the_sort_puts_the_most_confident_disagreement_first(run, browser):
    """doc-5's judge reverses the humans with P(A) far from 0.5: its pairs come first, the most
    confident (c1 vs c3: strengths 2 apart) at the top; pairs that agree come after."""
    _load(browser, run / "report.html")
    browser.evaluate(
        "const s = document.getElementById('sort'); s.value = 'disagree'; s.dispatchEvent(new Event('change'))"
    )
    rows = browser.evaluate(ROWS)
    assert rows[:3] == [["doc-5", "c1", "c3"], ["doc-5", "c1", "c2"], ["doc-5", "c2", "c3"]]
    humans = browser.evaluate("document.querySelector('#pairs-body td.humans').textContent")
    assert "disagrees with humans" in humans and "(judge: c1, 0.9975)" in humans
    assert "disagrees with humans" not in browser.evaluate(
        "document.querySelectorAll('#pairs-body td.humans')[3].textContent"
    )


def test_each_pair_shows_its_answer_token_log_probs(run, browser):
    """+ opens the pair's answer tokens with their log-probs in both orders, as judgments.jsonl holds them
    (3 significant digits)."""
    _load(browser, run / "report.html")
    browser.evaluate("document.querySelector('button.open').click()")
    table = browser.evaluate("""Array.from(document.querySelectorAll('#detail-0 table.lp tbody tr')).map(tr =>
      Array.from(tr.children).map(td => td.textContent))""")
    judgments, _ = load_judgments(run / "judgments.jsonl")
    by = {(j.doc_id, j.a_id, j.b_id): j.token_logprobs for j in judgments}
    ij, ji = by["doc-1", "c1", "c2"], by["doc-1", "c2", "c1"]
    assert [t[0] for t in table] == ['A "A"', 'A " A"', 'B "B"', 'B " B"']
    for (_, x, y), key in zip(table, ("A:A", "A: A", "B:B", "B: B")):
        assert float(x) == float(f"{ij[key]:.3g}") and float(y) == float(f"{ji[key]:.3g}")


def test_a_pair_without_a_gold_label_says_so(tmp_path, browser):
    """A gold-label file: the pairs holding the gold candidate show it; a pair without it (gold_a null)
    shows "no gold label", never a label for either side; the documents view marks the gold candidate."""
    doc = Document(
        "q1",
        "Which answer is right?",
        tuple(Candidate(c, f"answer {c}") for c in ("c1", "c2", "c3")),
        gold="c2",
    )
    judgments = [
        Judgment(
            "q1", a, b, 0.6, {"A:A": -0.5, "B:B": -0.9}, gold_a=None if "c2" not in (a, b) else a == "c2"
        )
        for a in ("c1", "c2", "c3")
        for b in ("c1", "c2", "c3")
        if a != b
    ]
    out = tmp_path / "gold"
    out.mkdir()
    write_run(
        out,
        judgments,
        0.5,
        task="jsonl",
        aspect=None,
        family="preference",
        instruction=INSTRUCTION,
        judge_identity="fixed P(A) 0.6",
        n_docs=1,
        shuffles=1,
        seed=0,
        metrics=MetricsSettings(0),
    )
    write_report(out, [doc], None)
    _load(browser, out / "report.html")
    cells = browser.evaluate("""Array.from(document.querySelectorAll('#pairs-body tr.pair')).map(tr =>
      [tr.children[1].textContent, tr.children[2].textContent, tr.querySelector('td.humans').textContent.split(' \\u2022')[0]])""")
    assert cells == [["c1", "c2", "gold: c2"], ["c1", "c3", "no gold label"], ["c2", "c3", "gold: c2"]]
    ranking = browser.evaluate(
        "Array.from(document.querySelectorAll('tr.cand-rank')).map(r => r.children[3].textContent)"
    )
    assert sorted(ranking) == ["gold", "\u2013", "\u2013"]


LAYOUT = """(() => {
  const W = document.documentElement.clientWidth, box = e => e.getBoundingClientRect();
  const humans = Array.from(document.querySelectorAll('#pairs-table th, #pairs-body td.humans'))
    .filter(e => e.tagName === 'TD' || e.textContent === 'humans');
  const ids = Array.from(document.querySelectorAll('#pairs-body .id, #docs-body .id'));
  const line = parseFloat(getComputedStyle(ids[0]).lineHeight) || 20;
  const metrics = document.querySelector('section.set .metrics table');
  const walk = document.createTreeWalker(document.getElementById('pairs-body'), NodeFilter.SHOW_TEXT), loose = [];
  for (let t = walk.nextNode(); t; t = walk.nextNode())
    if (t.parentElement.closest('tr.pair') && t.textContent.includes('%s') && !t.parentElement.closest('.id'))
      loose.push(t.textContent);
  return {W, page: document.documentElement.scrollWidth,
    humansRight: Math.max(...humans.map(e => box(e).right)),
    loose,
    split: ids.filter(e => e.getClientRects().length !== 1 || box(e).height > 1.5 * line).map(e => e.textContent),
    cut: ids.filter(e => e.scrollWidth > e.clientWidth).map(e => e.textContent),
    metricsRight: box(metrics).right, metricsWidth: metrics.scrollWidth, metricsBox: metrics.parentElement.clientWidth};
})()""".replace("%s", LONG_ID)


def test_the_page_reads_at_800_and_1400_px(run, browser, tmp_path):
    """At 800 px the humans column is on screen and no id is broken across lines (a long id is cut with an
    ellipsis and kept whole in its title); nothing widens the page. At 1400 px the every-metric table
    (every variant, with its intervals) fits. Negative controls: the old rule that let ids break anywhere
    splits the long id at 800 px; the old unbroken metric cells overflow at 1400 px."""
    b = browser
    for width in (800, 1400):
        b.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False},
            session=True,
        )
        _load(b, run / "report.html")
        b.evaluate(
            "document.querySelectorAll('section.set details').forEach(d => d.open = true);"
            "document.getElementById('query').value = 'doc-12';"
            "document.getElementById('query').dispatchEvent(new Event('input'))"
        )
        got = b.evaluate(LAYOUT)
        assert got["page"] <= got["W"], got
        assert got["humansRight"] <= got["W"] and got["split"] == [] and got["loose"] == [], got
        if width == 1400:
            assert got["metricsRight"] <= got["W"] and got["metricsWidth"] <= got["metricsBox"], got
            b.evaluate(  # control: the old cells, value and reason on one line, do not fit
                "const s = document.createElement('style'); s.textContent = '.metrics td.num { white-space: "
                "nowrap !important }'; document.head.appendChild(s)"
            )
            got = b.evaluate(LAYOUT)
            assert got["metricsWidth"] > got["metricsBox"], got
        else:
            assert LONG_ID in got["cut"]  # too long for its column: cut (its text whole), not broken
            b.screenshot(tmp_path / "800.png")  # looked at by hand: readable
            b.evaluate(
                "const s = document.createElement('style'); s.textContent = '.id { white-space: normal "
                "!important; overflow-wrap: anywhere !important; display: inline !important }';"
                "document.head.appendChild(s)"
            )
            assert LONG_ID in b.evaluate(LAYOUT)["split"]


def test_a_jobs_page_links_to_its_sweeps_index(run, browser, tmp_path):
    """A job's page (its run directory below a folder with Hydra's multirun.yaml) links to the sweep's
    index.html by a relative href, which resolves to that file from the page; a merged run two
    folders down links two up; a page written before the index says it is not there yet; a run outside
    any sweep has no such link."""
    sweep = tmp_path / "a sweep #1"
    for rel in ("0", "merged/all"):
        shutil.copytree(run, sweep / rel, ignore=shutil.ignore_patterns("report.html"))
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    write_report(sweep / "0", None)
    _load(browser, sweep / "0" / "report.html")
    assert "sweep index (no index.html there when this page was written" in browser.evaluate(
        "document.querySelector('nav').textContent"
    )
    (sweep / "index.html").write_text("<html><body>index</body></html>")
    for rel, href in (("0", "../index.html"), ("merged/all", "../../index.html")):
        write_report(sweep / rel, None)
        _load(browser, sweep / rel / "report.html")
        got = browser.evaluate(
            "(() => { const a = document.getElementById('sweep-index');"
            "return [a.getAttribute('href'), a.href]; })()"
        )
        assert got == [href, (sweep / "index.html").resolve().as_uri()]
        assert "no index.html" not in browser.evaluate("document.querySelector('nav').textContent")
    _load(browser, run / "report.html")
    assert browser.evaluate("document.getElementById('sweep-index')") is None


def test_the_pooled_metrics_are_defined_where_they_appear(run, browser):
    """spearman_whole and kendall_whole carry their definition in the every-metric table."""
    _load(browser, run / "report.html")
    names = browser.evaluate("""Object.fromEntries(Array.from(document.querySelectorAll('section.set .metrics tbody tr'))
      .map(tr => [tr.querySelector('.metric').textContent, tr.children[0].textContent]))""")
    assert "pooled over documents: ONE Spearman of (win rate, human score)" in names["spearman_whole"]
    assert "pooled over documents" in names["kendall_whole"] and "define" not in names["a_rate"]


def test_zepo_summary_is_a_table(tmp_path, browser):
    """A ZEPO run's summary.md (harness.zepo.run.before_after_table, as the run writes it) is an HTML
    table on the page, its header and one row per instruction, no <pre>; its texts are inert."""
    from harness.zepo.run import before_after_table

    def part(index: int, rho: float) -> dict:
        metrics = {"none": {"spearman_pairs": rho}, "permutation": {"spearman_pairs": rho}}
        return {
            "index": index,
            "metrics": {"none": {"a_rate": 0.5, "a_rate_prob": 0.52, "spearman": rho}},
            "metrics_leaky": metrics,
            "metrics_heldout": metrics,
            "search": {"objectives": {"fairness": -0.5 + index / 10}, "a_rate": 0.5, "a_rate_prob": 0.5},
            "n_heldout_docs": 2,
        }

    results = {
        "experiment": "zepo",
        "objective": "fairness",
        "leak_search_docs": False,
        "task": "<b>mine</b>",
        "aspect": "overall",
        "search_doc_ids": ["d0"],
        "eval_doc_ids": ["d1", "d2"],
        "n_candidates": 4,
        "initial": part(0, 0.2),
        "best": part(3, 0.4),
    }
    out = tmp_path / "zepo"
    out.mkdir()
    (out / "results.json").write_text(json.dumps(results))
    (out / "history.jsonl").write_text(json.dumps({"index": 0, "text": "initial text"}) + "\n")
    (out / "summary.md").write_text(before_after_table(results) + "\n")
    write_report(out, None)
    _load(browser, out / "report.html")
    cells = browser.evaluate("""Array.from(document.querySelectorAll('#zepo + .summary-md table tr')).map(tr =>
      Array.from(tr.children).map(c => c.textContent))""")
    assert len(cells) == 3 and cells[0][:2] == ["instruction", "search fairness"] and len(cells[0]) == 10
    assert [r[:2] for r in cells[1:]] == [["initial (#0)", "-0.500"], ["best (#3)", "-0.200"]]
    assert browser.evaluate("document.querySelector('.summary-md p').textContent").startswith(
        "ZEPO <b>mine</b>/overall"
    )
    assert browser.evaluate("document.querySelectorAll('#zepo ~ pre, .summary-md b').length") == 0
