"""Judging documents: a request for every ordered pair, scored by a judge, written to and read back
from judgments.jsonl (one Judgment per line, errors naming the file, the record and the field).

    requests, templates = build_requests(docs, instruction, family, aspect)
    judgments, p_cf = judge_documents(judge, docs, aspect=..., instruction=..., family=...)
    write_judgments(path, judgments, p_cf); load_judgments(path)
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from harness.errors import ConfigError, DataError, JudgeOutputError, located
from harness.files import read_text, write_jsonl_atomic
from harness.judges.answers import UNIFORM
from harness.judges.base import Judge, supports_progress
from harness.judges.prefix import trie_size
from harness.progress import counted, heartbeat
from harness.prompts import render
from harness.records import Candidate, Document, Judgment, PairRequest, PairScore

log = logging.getLogger(__name__)

CONTENT_FREE = "N/A"
"""What every content slot holds in the content-free prompt (contextual calibration)."""

MIN_ANSWER_MASS = 0.2
"""A pair whose answer tokens hold less than this share of the judge's next-token probability is
flagged LOW_MASS, and a run whose median is below it gets one warning (harness.metrics.card).

Why 0.2: below it, at least four answers in five sampled from the judge would not be a label, so
P(A) renormalises a minority of the judge's behaviour rather than its answer. The failures it is
meant to catch are far below it: a base model, and SmolLM2-135M-Instruct without its chat template
(the prompt's 'Answer: ' is continued by a newline); with its template the label is its top token
(docs/report_card.md has the measurements). Where a backend reads only the top-K logprobs, missing
variants count as 0, so the mass is a lower bound."""

LOW_MASS = "low_answer_mass"
"""Judgment flag: the pair's answer mass is below MIN_ANSWER_MASS. The pair stays in the data and
in every metric (its P(A) is still the judge's reading); the flag says how little it rests on."""

ROW_KEYS = ("doc_id", "a_id", "b_id", "p_a", "token_logprobs", "human_a", "human_b", "gold_a", "flags")
"""Keys of one judgments.jsonl row, in the order they are written."""


def judgment_to_row(j: Judgment) -> dict[str, Any]:
    """One judgments.jsonl row (JSON-ready; -inf logprobs and NaN P(A) stay floats)."""
    logprobs = {str(k): float(v) for k, v in j.token_logprobs.items()}
    values = (
        j.doc_id,
        j.a_id,
        j.b_id,
        float(j.p_a),
        logprobs,
        _opt(j.human_a, float),
        _opt(j.human_b, float),
        _opt(j.gold_a, bool),
        list(j.flags),
    )
    return dict(zip(ROW_KEYS, values))


def _opt(x: Any, kind: type) -> Any:
    return None if x is None else kind(x)


def _number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def judgment_from_row(
    row: Mapping[str, Any], path: object = "<row>", record: object | None = None
) -> Judgment:
    """Parse a judgments.jsonl row; DataError names path, record and field on a bad value."""

    def bad(field: str | None, why: str) -> DataError:
        return DataError(why, where=located(path, record, field))

    if not isinstance(row, Mapping):
        raise bad(None, f"expected a JSON object, got {type(row).__name__}")
    for key in ("doc_id", "a_id", "b_id"):
        if not isinstance(row.get(key), str):
            raise bad(key, f"must be a string, got {row.get(key)!r}")
    p_a = row.get("p_a")
    if p_a is None and row.get("flags"):
        p_a = math.nan  # strict JSON writes a flagged pair's NaN as null (harness.files.jsonable)
    if not _number(p_a) or not (math.isnan(p_a) or 0 <= p_a <= 1):
        raise bad("p_a", f"must be a probability in [0, 1] (or NaN), got {p_a!r}")
    logprobs = row.get("token_logprobs") or {}
    if isinstance(logprobs, Mapping):  # strict JSON writes a probability-0 token's -inf as "-inf"
        logprobs = {k: (float(v) if v in ("-inf", "-Infinity") else v) for k, v in logprobs.items()}
    if not isinstance(logprobs, Mapping) or not all(
        isinstance(k, str) and _number(v) for k, v in logprobs.items()
    ):
        raise bad("token_logprobs", "must map token keys (strings) to numbers")
    for key in ("human_a", "human_b"):
        if row.get(key) is not None and not _number(row[key]):
            raise bad(key, f"must be a number or null, got {row[key]!r}")
    if row.get("gold_a") is not None and not isinstance(row["gold_a"], bool):
        raise bad("gold_a", f"must be true, false or null, got {row['gold_a']!r}")
    flags = row.get("flags") or []
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise bad("flags", f"must be a list of strings, got {flags!r}")
    logprobs = {k: float(v) for k, v in logprobs.items()}
    return Judgment(
        row["doc_id"],
        row["a_id"],
        row["b_id"],
        float(p_a),
        logprobs,
        _opt(row.get("human_a"), float),
        _opt(row.get("human_b"), float),
        row.get("gold_a"),
        tuple(flags),
    )


def answer_mass(token_logprobs: Mapping[str, float]) -> float:
    """Total probability of every answer-token variant of every label, before renormalising
    (0 when none was read)."""
    return float(sum(math.exp(v) for v in token_logprobs.values()))


# -- requests ---------------------------------------------------------------------------------
def document_fingerprints(docs: Sequence[Document]) -> dict[str, str]:
    """results.json "documents_sha256": {document id: sha256 (16 hex) of everything of it a prompt
    or a metric reads (source, context, gold, each candidate's id, text and scores)}, so a report
    can tell the data it loads now from the data the run judged."""
    return {
        d.id: hashlib.sha256(
            json.dumps(
                [d.source, d.context, d.gold, [[c.id, c.text, dict(c.scores)] for c in d.candidates]],
                ensure_ascii=False,
                sort_keys=True,
            ).encode()
        ).hexdigest()[:16]
        for d in docs
    }


MAX_PAIRS = 1_000_000
"""The most ordered pairs one run may make (a run over all 100 SummEval documents makes 24,000, at
16 candidates each). Past it, the pairs alone take gigabytes before any model call (5,000
candidates in one document: 25 million pairs); `check_pair_count` refuses it first."""


def check_pair_count(docs: Sequence[Document], max_candidates: int | None, limit: int = MAX_PAIRS) -> None:
    """One line before any work when the documents would make more than `limit` ordered pairs."""
    k = [min(len(d.candidates), max_candidates) if max_candidates else len(d.candidates) for d in docs]
    pairs = sum(n * (n - 1) for n in k)
    if pairs > limit:
        worst = max(range(len(docs)), key=k.__getitem__)
        raise ConfigError(
            f"{len(docs)} documents would make {pairs:,} ordered pairs, more than the {limit:,} one run "
            f"may judge (document {docs[worst].id!r} alone has {k[worst]:,} candidates); set "
            "task.max_candidates=N (the first N candidates of each document) or fewer task.docs"
        )


def ordered_pairs(doc: Document, max_candidates: int | None = None) -> list[tuple[Candidate, Candidate]]:
    cands = doc.candidates[:max_candidates] if max_candidates else doc.candidates
    return list(itertools.permutations(cands, 2))


def _pair_requests(
    docs: Sequence[Document], instruction: str, family: str, max_candidates: int | None
) -> Iterator[tuple[Document, Candidate, Candidate, PairRequest]]:
    """Every ordered pair of every document with its rendered request, in judging order."""
    for doc in docs:
        for a, b in ordered_pairs(doc, max_candidates):
            yield doc, a, b, PairRequest(doc.id, a.id, b.id, render(doc, a, b, instruction, family))


def build_requests(
    docs: Sequence[Document],
    instruction: str,
    family: str,
    aspect: str | None,
    max_candidates: int | None = None,
) -> tuple[list[PairRequest], list[Judgment]]:
    """Requests for all ordered pairs, and Judgment templates carrying the human labels."""
    requests, templates = [], []
    for doc, a, b, request in _pair_requests(docs, instruction, family, max_candidates):
        requests.append(request)
        # A gold label says which of the pair humans prefer only when the pair holds the gold
        # candidate; a pair of two others has none (not "B wins" in both orders).
        gold = doc.gold == a.id if doc.gold in (a.id, b.id) else None
        templates.append(
            Judgment(
                doc.id,
                a.id,
                b.id,
                float("nan"),
                {},
                a.scores.get(aspect) if aspect else None,
                b.scores.get(aspect) if aspect else None,
                gold,
            )
        )
    return requests, templates


def iter_requests(
    docs: Sequence[Document], instruction: str, family: str, max_candidates: int | None = None
) -> Iterator[PairRequest]:
    """`build_requests`' requests one at a time, then the content-free probe's: what a judge was
    asked, rendered again for its work report without a list of every prompt (at SummEval's size,
    24,000 prompts of about 4 KB each) held at once."""
    for *_, request in _pair_requests(docs, instruction, family, max_candidates):
        yield request
    yield content_free_request(instruction, family)


def content_free_request(instruction: str, family: str) -> PairRequest:
    """Zhao et al. (2021): the same prompt with every content slot set to 'N/A'."""
    doc = Document(
        "__content_free__", CONTENT_FREE, (Candidate("cf_a", CONTENT_FREE), Candidate("cf_b", CONTENT_FREE))
    )
    return PairRequest(
        doc.id, "cf_a", "cf_b", render(doc, doc.candidates[0], doc.candidates[1], instruction, family)
    )


# -- scoring ----------------------------------------------------------------------------------
def score(
    judge: Judge, requests: Sequence[PairRequest], progress: bool = True, desc: str = "judging"
) -> list[PairScore]:
    """Score requests, with a progress bar (rate and ETA) when the judge can drive one, redrawn
    every few seconds while a forward runs (harness.progress.heartbeat)."""
    with (
        tqdm(total=len(requests), desc=desc, unit="pair", disable=not progress, dynamic_ncols=True) as bar,
        heartbeat(bar),
    ):
        if supports_progress(judge):
            return judge.score_pairs(requests, progress=bar)  # type: ignore[call-arg]
        scores = judge.score_pairs(requests)
        bar.update(len(requests))
        return scores


def judge_documents(
    judge: Judge,
    docs: Sequence[Document],
    *,
    aspect: str | None,
    instruction: str,
    family: str,
    max_candidates: int | None = None,
    progress: bool = True,
) -> tuple[list[Judgment], float]:
    """All ordered pairs judged (cached), plus the content-free P(A)."""
    requests, templates = build_requests(docs, instruction, family, aspect, max_candidates)
    if not requests:
        raise DataError("no pairs to judge: every document needs at least two candidates")
    scores = score(
        judge,
        [*requests, content_free_request(instruction, family)],
        progress,
        desc=f"judging {counted(len(requests), 'pair')} + the content-free probe",
    )
    judgments = [judged(t, s) for t, s in zip(templates, scores)]
    refuse_all_unreadable(judge, judgments)
    return judgments, scores[-1].p_a


def refuse_all_unreadable(judge: Judge, judgments: Sequence[Judgment]) -> None:
    """JudgeOutputError when no pair's answer could be read: every metric would be null (or, as
    before, a 0.0 correlation that looks like a result). Some unreadable pairs are a count in
    results.json (n_unreadable) and a warning; all of them are one line naming the model. So is a
    judge whose every answer ties: each pair's answer tokens all at one log-probability, P(A) 0.5
    everywhere, which looks like a perfectly fair judge and measures nothing."""
    name = getattr(judge, "identity", type(judge).__name__)
    bad = sum("unreadable" in j.flags for j in judgments)
    flat = sum(UNIFORM in j.flags for j in judgments)
    why = (
        f"{flat} of them with a uniform next-token distribution: every logit equal, as when activations "
        "overflow"
        if flat
        else "NaN/inf log-probs, or no probability on any label"
    )
    if judgments and bad == len(judgments):
        raise JudgeOutputError(
            f"the judge {name} gave no usable answer for any of the {bad} pairs ({why}): nothing to measure; "
            "check the weights (model.path) and the dtype (backend.dtype=float32)"
        )
    if bad:
        log.warning(
            "%d of %d pairs unreadable (%s): flagged, counted in n_unreadable, left out of every metric",
            bad,
            len(judgments),
            why,
        )
    read = [j for j in judgments if "unreadable" not in j.flags and j.token_logprobs]
    if len(read) >= 2 and all(len(set(j.token_logprobs.values())) == 1 for j in read):
        raise JudgeOutputError(
            f"the judge {name} gave all its answer tokens one and the same log-probability in every one of the "
            f"{len(read)} read pairs (P(A) 0.5 everywhere, whatever was asked): its logits are degenerate, not "
            "fair; check the weights (model.path) and the dtype (backend.dtype=float32)"
        )


def judge_instructions(
    judge: Judge,
    jobs: Sequence[tuple[Sequence[Document], str]],
    *,
    aspect: str | None,
    family: str,
    max_candidates: int | None = None,
    progress: bool = True,
) -> list[tuple[list[Judgment], float]]:
    """`judge_documents` for every (documents, instruction) job, in ONE judge call: what each
    returns alone (the same prompts, so the same cache keys and scores), but the requests are
    interleaved pair by pair across the jobs, so the prompts of one pair under every instruction
    (identical up to the instruction, which comes last) sit together and the judge's prefix
    reuse computes their shared part once (a ZEPO epoch, a ZEPO run's final
    evaluation of the initial and the best instruction, a sensitivity study)."""
    built = []
    for docs, instruction in jobs:
        requests, templates = build_requests(docs, instruction, family, aspect, max_candidates)
        if not requests:
            raise DataError("no pairs to judge: every document needs at least two candidates")
        built.append(([*requests, content_free_request(instruction, family)], templates))
    rank: dict[tuple[str, str, str], int] = {}  # pairs in their first job's order; content-free prompts last
    for requests, _ in built:
        for r in requests:
            rank.setdefault((r.doc_id, r.a_id, r.b_id), len(rank))
    order = sorted(
        ((k, job) for job, (requests, _) in enumerate(built) for k in range(len(requests))),
        key=lambda kj: (rank[_pair_key(built[kj[1]][0][kj[0]])], kj[1]),
    )
    pairs = sum(len(requests) - 1 for requests, _ in built)
    scores = score(
        judge,
        [built[job][0][k] for k, job in order],
        progress,
        desc=f"judging {counted(pairs, 'pair')} ({counted(len(built), 'instruction')}) + "
        f"{'the content-free probe' if len(built) == 1 else f'{len(built)} content-free probes'}",
    )
    by_job: list[list[PairScore | None]] = [[None] * len(requests) for requests, _ in built]
    for (k, job), s in zip(order, scores):
        by_job[job][k] = s
    out = []
    for (_, templates), got in zip(built, by_job):
        judgments = [judged(t, s) for t, s in zip(templates, got)]  # type: ignore[arg-type]
        refuse_all_unreadable(judge, judgments)
        out.append((judgments, got[-1].p_a))  # type: ignore[union-attr]
    return out


def _pair_key(r: PairRequest) -> tuple[str, str, str]:
    return (r.doc_id, r.a_id, r.b_id)


def judged(t: Judgment, s: PairScore) -> Judgment:
    """The judgment of request template `t` (its pair and human labels) with its score `s`."""
    return Judgment(
        t.doc_id,
        t.a_id,
        t.b_id,
        s.p_a,
        dict(s.token_logprobs),
        t.human_a,
        t.human_b,
        t.gold_a,
        tuple(s.flags) + _mass_flags(s),
    )


def _mass_flags(s: PairScore) -> tuple[str, ...]:
    """LOW_MASS for a read pair with little answer mass, `no_answer` included (the judge wrote no
    answer token: mass 0, as harness.metrics.mass counts it); an unreadable pair has no reading."""
    if "unreadable" in s.flags or LOW_MASS in s.flags:
        return ()
    return (LOW_MASS,) if answer_mass(s.token_logprobs) < MIN_ANSWER_MASS else ()


# -- the judge's work ---------------------------------------------------------------------------
WORK_COUNTERS = ("prompts", "tokens_processed", "seconds", "weight_loads")
"""Counters a local judge keeps (harness.judges.hf.HFJudge): prompts scored, tokens run through
the model (shared prefixes once), seconds scoring (score_pairs and stream_scores), and weight
loads (0 when every request came from the cache: the weights are read on the first miss)."""


WORK_CHUNK = 1024
"""Requests `judge_work` renders and looks up at a time for its trie minimum."""


def model_judge(judge: Any) -> Any:
    """The judge that runs the model, under the request cache and preemption wrappers (`.judge`)."""
    while getattr(judge, "judge", None) is not None:
        judge = judge.judge
    return judge


def work_counters(judge: Any) -> dict[str, float]:
    """The model judge's counters now (absent ones left out: vLLM and API judges keep none)."""
    inner = model_judge(judge)
    return {k: getattr(inner, k) for k in WORK_COUNTERS if isinstance(getattr(inner, k, None), int | float)}


def judge_work(
    judge: Any,
    requests: Callable[[], Iterable[PairRequest]],
    before: Mapping[str, float],
    judging_s: float,
) -> dict[str, Any]:
    """What the judge did for `requests` (built only when the judge computed any: a cached run
    renders its prompts once) since the counters were `before` (results.json's `judge_work`):
    prompts it scored (cache misses), tokens it ran, the trie minimum of the requests' token ids
    (the fewest tokens any prefix-sharing scheme runs for all of them), its prompts/s, and its
    share of the judging step's wall time (the rest: cache, wrappers, I/O)."""
    now = work_counters(judge)
    work: dict[str, Any] = {k: now[k] - before.get(k, 0) for k in now}
    inner = model_judge(judge)
    computed = (
        work.get("prompts") != 0 and getattr(judge, "calls", None) != 0
    )  # a cached run tokenizes nothing
    rows = getattr(inner, "token_rows", None) or getattr(inner, "encode", None)
    if rows is not None and computed:
        ids: list[Sequence[int]] = []
        them = iter(requests())
        while part := list(itertools.islice(them, WORK_CHUNK)):  # not every prompt's text at once
            ids.extend(rows(part))
        if ids:
            work["trie_minimum"] = trie_size(ids)
    seconds = work.get("seconds")
    if seconds:
        work["prompts_per_s"] = work.get("prompts", 0) / seconds
    work["judging_s"] = judging_s
    if seconds is not None and judging_s > 0:
        work["judge_share"] = seconds / judging_s
    return work


# -- judgments.jsonl --------------------------------------------------------------------------
def write_judgments(path: Path, judgments: Sequence[Judgment], p_cf: float) -> None:
    rows = [judgment_to_row(j) for j in judgments]
    rows.append({"kind": "content_free", "p_a": p_cf})
    write_jsonl_atomic(path, rows)
    _remember(Path(path), judgments, p_cf)


REMEMBERED = 100_000
"""The most judgments `load_judgments` keeps of the files this process wrote (the oldest files
forgotten first): a run reads its judgments.jsonl back right after writing it, for its report card
and its report.html (parsing 24,000 rows costs ~0.5 CPU-s each time); a multirun's jobs in one
process do not pile up."""
_written: dict[Path, tuple[bytes, list[Judgment], float]] = {}


def _stamp(path: Path) -> bytes:
    """The file's content digest (blake2b: ~20 ms for 24,000 rows, no parse)."""
    return hashlib.blake2b(path.read_bytes(), digest_size=20).digest()


def _remember(path: Path, judgments: Sequence[Judgment], p_cf: float | None) -> None:
    """What `load_judgments` would read back from the file just written, when every judgment is
    one it reads back as the same values (else nothing: it parses the file)."""
    _written.pop(path.resolve(), None)
    read = [_as_read(j) for j in judgments]
    if len(read) > REMEMBERED or any(j is None for j in read) or not _finite_or_nan(p_cf):
        return
    if len({(j.doc_id, j.a_id, j.b_id) for j in judgments}) < len(read):  # refused when read
        return
    while _written and sum(len(v[1]) for v in _written.values()) + len(read) > REMEMBERED:
        del _written[next(iter(_written))]
    p = math.nan if p_cf is None else float(p_cf)  # null reads back as NaN
    _written[path.resolve()] = (_stamp(path), read, p)  # type: ignore[arg-type]


def _finite_or_nan(x: float | None) -> bool:
    return x is None or (_number(x) and not math.isinf(x))


def _as_read(j: Judgment) -> Judgment | None:
    """`j` as judgment_from_row returns it from its judgments.jsonl row (`j` itself where it holds
    those types already); None for one whose row would not read back as these values (a NaN label,
    a non-string id: parsed, it is refused or changed)."""
    if not (type(j.doc_id) is str and type(j.a_id) is str and type(j.b_id) is str):
        return None
    p_a, lp, flags = float(j.p_a), j.token_logprobs, j.flags
    if not (0.0 <= p_a <= 1.0 or (math.isnan(p_a) and flags)):
        return None
    if type(lp) is not dict or not all(type(k) is str and type(v) is float for k, v in lp.items()):
        lp = {str(k): float(v) for k, v in lp.items()}
    if not all(v == -math.inf or math.isfinite(v) for v in lp.values()):
        return None
    human = []
    for x in (j.human_a, j.human_b):
        if x is not None and not (_number(x) and math.isfinite(x)):
            return None
        human.append(None if x is None else float(x))
    if not (j.gold_a is None or isinstance(j.gold_a, bool)) or not all(type(f) is str for f in flags):
        return None
    same = p_a is j.p_a and lp is j.token_logprobs and type(flags) is tuple
    if same and all(x is y for x, y in zip(human, (j.human_a, j.human_b))):
        return j
    return Judgment(j.doc_id, j.a_id, j.b_id, p_a, lp, human[0], human[1], j.gold_a, tuple(flags))


def load_judgments(path: str | Path) -> tuple[list[Judgment], float | None]:
    """Read judgments.jsonl back: (pair judgments, content-free P(A) or None). A run judges each
    ordered pair once, so a pair given twice is refused (which row would every metric use?). A file
    this process wrote, with the same bytes now, is not parsed again: its judgments as they read
    back (`_remember`)."""
    path = Path(path)
    kept = _written.get(path.resolve())
    if kept is not None and path.is_file() and _stamp(path) == kept[0]:
        return list(kept[1]), kept[2]
    judgments, p_cf = [], None
    first: dict[tuple[str, str, str], int] = {}
    for i, line in enumerate(read_text(path).splitlines(), 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"not valid JSON ({e.msg})", where=located(path, i)) from None
        if isinstance(row, dict) and row.get("kind") == "content_free":
            p_cf = math.nan if row.get("p_a") is None else float(row["p_a"])  # null: unreadable
            continue
        j = judgment_from_row(row, str(path), record=i)
        pair = (j.doc_id, j.a_id, j.b_id)
        if pair in first:
            raise DataError(
                f"repeats the ordered pair document {j.doc_id!r}, A {j.a_id!r}, B {j.b_id!r} of line "
                f"{first[pair]}: a run judges each pair once; remove one of the two rows (or rerun the "
                "run to rewrite the file)",
                where=f"{path}, line {i}",
            )
        first[pair] = i
        judgments.append(j)
    return judgments, p_cf
