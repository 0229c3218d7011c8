"""Dataset loaders on every real file of the mirror, and every bad-input case on tmp copies."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import time
from collections import Counter
from pathlib import Path

import pytest

from harness.data import JSONL, TASKS, default_data_dir, load_jsonl, load_task
from harness.data.manifest import sources
from harness.errors import ConfigError, DataError
from harness.prompts import ASPECT_GLOSS, FAMILIES

BUILTIN = [n for n in TASKS if n != JSONL]
ARENA_BENCH_MODELS = {
    "Llama-2-70b-chat",
    "Mistral-7B-Instruct-v0.1",
    "Mixtral-8x7B-Instruct-v0.1",
    "Starling-LM-7B-alpha",
    "claude-1",
    "claude-2.1",
    "claude-instant-1",
    "gpt-3.5-turbo-1106",
    "gpt-3.5-turbo",
    "gpt-4-0314",
    "gpt-4-1106-preview",
    "llama-13b",
    "openchat_3.5",
    "palm-2-chat-bison-001",
    "vicuna-13b-v1.5",
    "vicuna-33b-v1.3",
    "vicuna-7b-v1.5",
}

_loaded: dict[str, list] = {}


@pytest.fixture
def docs_of(shared_data):
    """Each real task loaded once per session (arena_bench parses ~40 MB)."""

    def get(name: str):
        if name not in _loaded:
            _loaded[name] = load_task(name, data_dir=shared_data)
        return _loaded[name]

    return get


def one_line_error(exc_type, fn, *args, **kwargs) -> str:
    with pytest.raises(exc_type) as info:
        fn(*args, **kwargs)
    msg = str(info.value)
    assert "\n" not in msg, msg
    return msg


# ---------------------------------------------------------------- the registry


def test_registry_is_consistent_with_sources_and_prompts():
    pinned = {s.file for s in sources()}
    assert set(BUILTIN) == {
        "summeval",
        "newsroom",
        "topicalchat",
        "usr_zepo",
        "llmbar_natural",
        "llmbar_mtbench",
        "arena_hard",
        "arena_bench",
    }
    for spec in TASKS.values():
        assert spec.family in FAMILIES
        assert set(spec.files) <= pinned, spec.name
        assert all(a in ASPECT_GLOSS for a in spec.aspects if a != "gpt4_score"), spec.aspects
    assert len(TASKS["arena_bench"].files) == 1 + 17 + 15


# ---------------------------------------------------------------- real data: shapes


@pytest.mark.parametrize(
    "name, n_docs, per_doc",
    [
        ("summeval", 100, {16: 100}),
        ("newsroom", 60, {7: 60}),
        ("topicalchat", 60, {6: 60}),
        ("usr_zepo", 60, {5: 60}),
        ("llmbar_natural", 100, {2: 100}),
        ("llmbar_mtbench", 200, {2: 200}),
        ("arena_hard", 500, {3: 500}),
        ("arena_bench", 300, {17: 273, 16: 27}),  # 27 empty upstream answers sit out
    ],
)
def test_real_counts_and_aspects(docs_of, name, n_docs, per_doc):
    docs = docs_of(name)
    spec = TASKS[name]
    assert len(docs) == n_docs
    assert len({d.id for d in docs}) == n_docs
    assert Counter(len(d.candidates) for d in docs) == per_doc
    for d in docs:
        assert d.source and d.source == d.source.strip()
        for c in d.candidates:
            assert c.text and c.text == c.text.strip()
            assert set(c.scores) <= set(spec.aspects)
            if name != "arena_bench":  # arena_bench: some grades are missing upstream
                assert set(c.scores) == set(spec.aspects)


def test_summeval_values_and_speed(shared_data):
    t0 = time.perf_counter()
    docs = load_task("summeval", data_dir=shared_data)
    assert time.perf_counter() - t0 < 1.0
    d = docs[0]
    assert d.id == "dm-test-8764fb95bfad8ee849274873a92fb8d6b400eee2"
    assert d.source.startswith("Paul Merson has restarted his row with Andros Townsend")
    m11 = d.candidate("M11")
    assert m11.text.startswith("Paul merson was brought on with only seven minutes remaining")
    assert m11.scores == pytest.approx(
        {"coherence": 4 / 3, "consistency": 1.0, "fluency": 3.0, "relevance": 5 / 3}
    )
    assert {c.id for c in d.candidates} == {
        f"M{i}" for i in (0, 1, 2, 5, 8, 9, 10, 11, 12, 13, 14, 15, 17, 20, 22, 23)
    }
    assert [x.id for x in load_task("summeval", data_dir=shared_data, limit=3)] == [x.id for x in docs[:3]]


def test_newsroom_html_cleaned_and_ids(docs_of):
    docs = docs_of("newsroom")
    d = docs[0]
    assert d.id == "2140"
    assert [c.id for c in d.candidates] == [str(i) for i in range(7)]
    assert "Editor's note: John Avlon" in d.source and "\n" in d.source
    assert d.candidate("0").scores["informativeness"] == pytest.approx(8 / 3)
    for doc in docs:
        for text in [doc.source] + [c.text for c in doc.candidates]:
            assert "<p>" not in text and "</p>" not in text and "&quot;" not in text and "&#x27;" not in text


def test_topicalchat_values(docs_of):
    d = docs_of("topicalchat")[0]
    assert d.context.startswith("from left , emma baker , daniel saperstein and taylor mulitz")
    assert len(d.source.split("\n")) == 5  # five turns, one per line, no padding
    assert d.source.startswith("so , i 'm reading the latest film from studio ghibli")
    assert [c.id for c in d.candidates] == [
        "Original Ground Truth",
        "Argmax Decoding",
        "Nucleus Decoding (p = 0.3)",
        "Nucleus Decoding (p = 0.5)",
        "Nucleus Decoding (p = 0.7)",
        "New Human Generated",
    ]
    assert d.candidate("Original Ground Truth").scores["overall"] == pytest.approx(4.6666666667)


def test_usr_zepo_means_and_mapping(docs_of):
    d = docs_of("usr_zepo")[0]
    assert d.source.startswith("hi there how are you doing this evening ?\nhi , sitting here")
    assert d.context.startswith("your persona: i also have a dog walking business.")
    assert [c.id for c in d.candidates] == [
        "Original Ground Truth",
        "KV-MemNN",
        "Seq2Seq",
        "Language Model",
        "New Human Generated",
    ]
    truth = d.candidate("Original Ground Truth")
    assert truth.text == "ha ha i'm so shy"
    # Engaging [1,2,1], Overall [3,4,4], Maintains Context [3,3,3], Uses Knowledge [0,0,0]
    assert truth.scores == pytest.approx(
        {
            "understandability": 1.0,
            "naturalness": 3.0,
            "coherence": 3.0,
            "engagingness": 4 / 3,
            "groundedness": 0.0,
            "overall": 11 / 3,
        }
    )
    assert d.candidate("KV-MemNN").scores["groundedness"] == pytest.approx(2 / 3)


def test_llmbar_gold(docs_of):
    for name, counts in (("llmbar_natural", {"1": 42, "2": 58}), ("llmbar_mtbench", {"1": 101, "2": 99})):
        docs = docs_of(name)
        assert Counter(d.gold for d in docs) == counts
        assert all([c.id for c in d.candidates] == ["1", "2"] and not d.candidates[0].scores for d in docs)
    first = docs_of("llmbar_mtbench")[0]
    assert first.source.startswith("Explain what's base rate fallacy")


def test_arena_hard_values(docs_of):
    docs = docs_of("arena_hard")
    assert docs[0].id == "328c149ed45a41c0b9d6f14659e63599"
    assert docs[0].source == "Use ABC notation to write a melody in the style of a folk tune."
    assert all(
        {c.id for c in d.candidates} == {"gpt-4-0314", "gpt-4-0613", "gpt-3.5-turbo-0125"} for d in docs
    )


def _raw_scores(shared_data: Path, file: str) -> dict[str, object]:
    path = shared_data / "arena-bench-v1/model_judgment" / file
    return {r["question_id"]: r.get("score") for r in map(json.loads, path.read_text().splitlines())}


def test_arena_bench_scores_follow_the_judgment_records(docs_of, shared_data):
    docs = docs_of("arena_bench")
    assert set().union(*({c.id for c in d.candidates} for d in docs)) == ARENA_BENCH_MODELS
    assert sum(len(d.candidates) for d in docs) == 300 * 17 - 27
    per_model = Counter()
    scored = Counter()
    for d in docs:
        for c in d.candidates:
            per_model[c.id] += 1
            if c.scores:
                scored[c.id] += 1
                assert 1 <= c.scores["gpt4_score"] <= 10
    assert per_model["llama-13b"] == 274 and per_model["Mixtral-8x7B-Instruct-v0.1"] == 299
    assert scored["vicuna-7b-v1.5"] == scored["vicuna-13b-v1.5"] == 0  # no judgment files upstream
    assert scored["gpt-4-0314"] == 297 and scored["palm-2-chat-bison-001"] == 294  # 3 and 6 null grades
    assert scored["llama-13b"] == 272  # graded in ..._judge_any.jsonl: 26 empty answers, 2 null grades
    # gpt-4-turbo.jsonl grades gpt-4-1106-preview; gpt-3.5-turbo.jsonl holds scores written as "10.0".
    for file, model in (
        ("gpt-4-turbo.jsonl", "gpt-4-1106-preview"),
        ("gpt-3.5-turbo.jsonl", "gpt-3.5-turbo"),
    ):
        raw = _raw_scores(shared_data, file)
        for d in docs:
            want = raw[d.id]
            got = d.candidate(model).scores.get("gpt4_score")
            assert got == (None if want is None else float(want))


# ---------------------------------------------------------------- data dir, limits, names


def test_missing_file_says_how_to_fetch(tmp_path):
    msg = one_line_error(DataError, load_task, "summeval", data_dir=tmp_path)
    assert str(tmp_path / "summeval/data.pkl") in msg
    assert "python -m harness.data.fetch --only summeval" in msg and "--mirror" in msg
    msg = one_line_error(DataError, load_task, "arena_bench", data_dir=tmp_path)
    assert "and 32 more" in msg


def test_default_data_dir_from_env(shared_data, monkeypatch, tmp_path):
    monkeypatch.setenv("HARNESS_DATA_DIR", str(shared_data))
    assert default_data_dir() == shared_data
    assert len(load_task("llmbar_natural", limit=5)) == 5
    monkeypatch.delenv("HARNESS_DATA_DIR")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_data_dir() == tmp_path / ".cache/harness/data"


def test_bad_names_and_limits(shared_data):
    assert "known: summeval" in one_line_error(ConfigError, load_task, "sumeval", data_dir=shared_data)
    for bad in (0, -1, 2.5, True):
        one_line_error(ConfigError, load_task, "newsroom", data_dir=shared_data, limit=bad)
    one_line_error(ConfigError, load_task, "newsroom", data_dir=shared_data, path="x.jsonl")
    one_line_error(ConfigError, load_task, JSONL)


# ---------------------------------------------------------------- bad inputs: summeval pickle


def _summeval_dir(tmp_path: Path, obj: object = None, raw: bytes | None = None) -> Path:
    root = tmp_path / "data"
    (root / "summeval").mkdir(parents=True)
    (root / "summeval/data.pkl").write_bytes(raw if raw is not None else pickle.dumps(obj, protocol=3))
    return root


def _summeval_obj(n_systems: int = 2) -> dict:
    systems = {
        f"M{i}": {
            "sys_summ": f"summary {i}",
            "scores": {"coherence": 1.0, "consistency": 2.0, "fluency": 3.0, "relevance": 4.0},
        }
        for i in range(n_systems)
    }
    return {"doc-1": {"src": "an article", "ref_summ": "r", "ref_summs": [], "sys_summs": systems}}


class _Payload:
    """Unpickling this would create a directory: proof of code execution if the marker exists."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def test_pickle_with_a_global_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "pwned"
    obj = _summeval_obj()
    obj["doc-1"]["src"] = _Payload(marker)
    msg = one_line_error(DataError, load_task, "summeval", data_dir=_summeval_dir(tmp_path, obj))
    assert "global posix.mkdir" in msg or "global nt.mkdir" in msg
    assert not marker.exists()


def test_pickle_of_a_harmless_class_is_refused_too(tmp_path):
    from collections import OrderedDict

    msg = one_line_error(DataError, load_task, "summeval", data_dir=_summeval_dir(tmp_path, OrderedDict()))
    assert "collections.OrderedDict" in msg


def test_truncated_pickle(tmp_path):
    raw = pickle.dumps(_summeval_obj(), protocol=3)[:-20]
    root = _summeval_dir(tmp_path, raw=raw)
    assert "not a valid pickle" in one_line_error(DataError, load_task, "summeval", data_dir=root)


def test_summeval_schema_errors(tmp_path):
    obj = _summeval_obj()
    del obj["doc-1"]["sys_summs"]["M1"]["sys_summ"]
    msg = one_line_error(DataError, load_task, "summeval", data_dir=_summeval_dir(tmp_path / "a", obj))
    assert "record doc-1/M1" in msg and "'sys_summ'" in msg and "missing" in msg
    obj = _summeval_obj()
    obj["doc-1"]["sys_summs"]["M0"]["scores"]["fluency"] = float("nan")
    msg = one_line_error(DataError, load_task, "summeval", data_dir=_summeval_dir(tmp_path / "b", obj))
    assert "'scores.fluency'" in msg and "finite" in msg
    msg = one_line_error(
        DataError, load_task, "summeval", data_dir=_summeval_dir(tmp_path / "c", _summeval_obj(1))
    )
    assert "1 candidate(s)" in msg
    assert (
        len(load_task("summeval", data_dir=_summeval_dir(tmp_path / "d", _summeval_obj(3)))[0].candidates)
        == 3
    )


# ---------------------------------------------------------------- bad inputs: JSON datasets


def _copy_task(shared_data: Path, tmp_path: Path, name: str, edit_file: str, edit) -> Path:
    """A data dir for `name`: symlinks to the mirror, except `edit_file`, rewritten by edit(text)."""
    root = tmp_path / "data"
    for rel in TASKS[name].files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        if rel == edit_file:
            (root / rel).write_text(edit((shared_data / rel).read_text(encoding="utf-8")), encoding="utf-8")
        else:
            (root / rel).symlink_to(shared_data / rel)
    return root


def _edit_json(fn):
    def edit(text: str) -> str:
        data = json.loads(text)
        fn(data)
        return json.dumps(data)

    return edit


NEWSROOM = "newsroom/newsroom.json"


@pytest.mark.parametrize(
    "mutate, expect",
    [
        (lambda d: d[3]["scores"].pop("relevance"), ["record 3", "'scores.relevance'", "missing"]),
        (lambda d: d[5]["scores"].update(fluency=float("nan")), ["record 5", "'scores.fluency'", "finite"]),
        (lambda d: d[2].update(system_output="   "), ["record 2", "'system_output'", "empty text"]),
        (lambda d: d[1].update(doc_id=d[8]["doc_id"]), ["record 2", "consecutive"]),
        (lambda d: d[0].update(source="another article"), ["record 1", "source differs"]),
        (lambda d: [d.pop(1) for _ in range(6)], ["record 0", "1 candidate(s)"]),
        (
            lambda d: d[4]["scores"].update(coherence="high"),
            ["record 4", "'scores.coherence'", "expected a number"],
        ),
    ],
)
def test_newsroom_bad_records(shared_data, tmp_path, mutate, expect):
    root = _copy_task(shared_data, tmp_path, "newsroom", NEWSROOM, _edit_json(mutate))
    msg = one_line_error(DataError, load_task, "newsroom", data_dir=root)
    assert str(root / NEWSROOM) in msg
    for part in expect:
        assert part in msg, msg


def test_not_json(shared_data, tmp_path):
    root = _copy_task(
        shared_data, tmp_path, "topicalchat", "topicalchat/topical_chat.json", lambda t: t[:500]
    )
    assert "not valid JSON" in one_line_error(DataError, load_task, "topicalchat", data_dir=root)


def test_usr_zepo_bad_votes_and_duplicate_models(shared_data, tmp_path):
    def bad_vote(d):
        d[2]["responses"][1]["Natural"][0] = "3"

    root = _copy_task(
        shared_data, tmp_path / "a", "usr_zepo", "usr_zepo/topicalchat_usr.json", _edit_json(bad_vote)
    )
    msg = one_line_error(DataError, load_task, "usr_zepo", data_dir=root)
    assert "record 2/responses[1]" in msg and "'Natural[0]'" in msg

    def same_model(d):
        d[0]["responses"][2]["model"] = d[0]["responses"][1]["model"]

    root = _copy_task(
        shared_data, tmp_path / "b", "usr_zepo", "usr_zepo/topicalchat_usr.json", _edit_json(same_model)
    )
    ids = [c.id for c in load_task("usr_zepo", data_dir=root, limit=1)[0].candidates]
    assert ids[1:3] == ["KV-MemNN", "KV-MemNN#2"]


def test_llmbar_labels(shared_data, tmp_path):
    file = "llmbar/Natural/dataset.json"
    root = _copy_task(
        shared_data, tmp_path / "a", "llmbar_natural", file, _edit_json(lambda d: d[7].update(label=3))
    )
    assert "record 7, field 'label'" in one_line_error(DataError, load_task, "llmbar_natural", data_dir=root)
    root = _copy_task(
        shared_data, tmp_path / "b", "llmbar_natural", file, _edit_json(lambda d: d[0].update(label="2"))
    )
    assert load_task("llmbar_natural", data_dir=root, limit=1)[0].gold == "2"
    empty = _edit_json(lambda d: d[9].update(output_2=""))
    root = _copy_task(shared_data, tmp_path / "c", "llmbar_natural", file, empty)
    msg = one_line_error(DataError, load_task, "llmbar_natural", data_dir=root)
    assert "record 9, field 'output_2': empty text" in msg


def _edit_line(n: int, fn):
    """Rewrite line n (1-based) of a JSONL text with fn(line) -> line."""

    def edit(text: str) -> str:
        lines = text.splitlines()
        lines[n - 1] = fn(lines[n - 1])
        return "\n".join(lines) + "\n"

    return edit


def test_arena_hard_bad_lines(shared_data, tmp_path):
    answers = "arena_hard_v0.1/model_answer/gpt-4-0613.jsonl"
    root = _copy_task(shared_data, tmp_path / "a", "arena_hard", answers, _edit_line(42, lambda s: s[:-5]))
    msg = one_line_error(DataError, load_task, "arena_hard", data_dir=root)
    assert f"{root / answers}, line 42: " in msg and "not valid JSON" in msg

    def drop_prompt(line: str) -> str:
        rec = json.loads(line)
        del rec["prompt"]
        return json.dumps(rec)

    questions = "arena_hard_v0.1/question.jsonl"
    root = _copy_task(shared_data, tmp_path / "b", "arena_hard", questions, _edit_line(7, drop_prompt))
    assert "line 7, field 'prompt': missing" in one_line_error(
        DataError, load_task, "arena_hard", data_dir=root
    )


@pytest.mark.parametrize(
    "score, expect", [(-1, None), ("8.0", 8.0), ("abc", "not a number"), (11, "1 to 10"), (True, "1 to 10")]
)
def test_arena_bench_score_values(shared_data, tmp_path, score, expect):
    file = "arena-bench-v1/model_judgment/claude-1.jsonl"

    def set_score(line: str) -> str:
        rec = json.loads(line)
        rec["score"] = score
        return json.dumps(rec)

    root = _copy_task(shared_data, tmp_path, "arena_bench", file, _edit_line(1, set_score))
    qid = json.loads((shared_data / file).read_text().splitlines()[0])["question_id"]
    if isinstance(expect, str):
        assert ", line 1, field 'score'" in one_line_error(DataError, load_task, "arena_bench", data_dir=root)
        return
    doc = next(d for d in load_task("arena_bench", data_dir=root) if d.id == qid)
    assert doc.candidate("claude-1").scores.get("gpt4_score") == expect


# ---------------------------------------------------------------- generic JSONL


def _write_jsonl(path: Path, rows: list) -> Path:
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8"
    )
    return path


def _row(doc="d1", cid="a", text="text", **extra) -> dict:
    return {"doc_id": doc, "source": f"source of {doc}", "candidate_id": cid, "text": text, **extra}


def test_jsonl_groups_by_doc_in_first_appearance_order(tmp_path):
    path = _write_jsonl(
        tmp_path / "mine.jsonl",
        [
            _row("d2", "x", scores={"overall": 2}, context="a fact"),
            _row("d1", "a", scores={"overall": 4.5}, gold="b"),
            "",
            _row("d2", 7, scores={"overall": 3}, context="a fact"),
            _row("d1", "b"),
        ],
    )
    docs = load_jsonl(path)
    assert [d.id for d in docs] == ["d2", "d1"]
    assert [c.id for c in docs[0].candidates] == ["x", "7"] and docs[0].context == "a fact"
    assert docs[1].gold == "b" and docs[1].candidate("a").scores == {"overall": 4.5}
    assert docs[1].candidate("b").scores == {}
    assert load_task(JSONL, path=path) == docs
    assert load_task(JSONL, path=str(path), limit=1) == docs[:1]


@pytest.mark.parametrize(
    "rows, expect",
    [
        ([_row(), '{"doc_id": "d1", "source": '], "line 2: not valid JSON"),
        (
            [_row(), {"doc_id": "d1", "source": "source of d1", "text": "t"}],
            "line 2, field 'candidate_id': missing",
        ),
        (
            [_row(), _row(cid="b", scores={"overall": float("nan")})],
            "line 2, field 'scores.overall': score is nan",
        ),
        (
            [_row(), _row(cid="b", scores={"overall": float("inf")})],
            "line 2, field 'scores.overall': score is inf",
        ),
        ([_row(), _row(cid="b", text=" \n")], "line 2, field 'text': empty text"),
        ([_row(), _row("d2", "b")], "line 1: document 'd1' has 1 candidate(s)"),
        ([_row(), _row(cid="b", score=3)], "line 2: unknown field(s) 'score'"),
        (
            [_row(), {**_row(cid="b"), "source": "other"}],
            "line 2, field 'source': source differs from line 1",
        ),
        ([_row(), _row(cid="a")], "line 2, field 'candidate_id': document 'd1' already has a candidate 'a'"),
        ([_row(gold="c"), _row(cid="b")], "line 1, field 'gold': gold 'c' is not a candidate"),
        ([_row(gold="a"), _row(cid="b", gold="b")], "line 2, field 'gold'"),
        (["[1, 2]"], "line 1: expected an object"),
        ([], "no records"),
    ],
)
def test_jsonl_errors_name_line_and_field(tmp_path, rows, expect):
    path = _write_jsonl(tmp_path / "bad.jsonl", rows)
    msg = one_line_error(DataError, load_jsonl, path)
    assert msg.startswith(str(path)) and expect in msg, msg


def test_jsonl_missing_file(tmp_path):
    assert "file not found" in one_line_error(DataError, load_task, JSONL, path=tmp_path / "nope.jsonl")


def test_loaders_read_a_fetched_copy(shared_data, tmp_path):
    """The mirror layout is the data-dir layout: a plain copy of one task's files loads."""
    for rel in TASKS["topicalchat"].files:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shared_data / rel, tmp_path / rel)
    assert len(load_task("topicalchat", data_dir=tmp_path, limit=10)) == 10


def test_arena_bench_judgment_of_unknown_model(shared_data, tmp_path):
    file = "arena-bench-v1/model_judgment/claude-2.1.jsonl"
    rename = _edit_line(3, lambda s: json.dumps({**json.loads(s), "model": "claude-9"}))
    root = _copy_task(shared_data, tmp_path, "arena_bench", file, rename)
    msg = one_line_error(DataError, load_task, "arena_bench", data_dir=root)
    assert "line 3, field 'model': judgment of model 'claude-9', which has no answer file" in msg
