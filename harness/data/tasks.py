"""The task registry: name -> how to load it, its prompt family, its scored aspects, its files."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.data import arena, dialogue, llmbar, newsroom, summeval
from harness.data.jsonl import load_jsonl
from harness.errors import ConfigError
from harness.records import Document

FORMATS = ("default", "zepo")
"""Ways of reading a dataset: this project's cleaning, or the official ZEPO loaders'."""

JSONL = "jsonl"
"""The task name for a user's own JSONL file (load_task(JSONL, path=...))."""


@dataclass(frozen=True)
class TaskSpec:
    """What the rest of the harness needs to know about a dataset."""

    name: str
    """Registry key, also the Hydra `task.name`."""
    family: str
    """Prompt layout: summarization | dialogue | instruction (see harness.prompts.FAMILIES).
    For `jsonl` only a default: the task config's `family` decides."""
    aspects: tuple[str, ...]
    """Keys of Candidate.scores this dataset provides (canonical aspect names). Empty for
    gold-label or unscored data, and for `jsonl` (whatever the user's file holds)."""
    loader: Callable[..., list[Document]]
    """loader(data_dir) -> documents in file order; the jsonl loader takes (data_dir, path=...)."""
    files: tuple[str, ...]
    """Files the loader reads, relative to the data directory (= the `file` column of
    sources.tsv, so `fetch --only` and the missing-file check use the same list)."""
    formats: tuple[str, ...] = ("default",)
    """How texts and human scores can be read: "default" (this project's cleaning) and, for the
    ZEPO paper's datasets, "zepo" (exactly as the official ZEPO loaders)."""


def _load_user_jsonl(data_dir: Path, path: str | Path | None = None) -> list[Document]:
    # A user's file lives wherever the user keeps it: `path` is taken as given (relative to the
    # working directory), never inside the pinned-data directory.
    del data_dir
    if path is None or str(path) in ("", "???"):
        raise ConfigError(
            "task jsonl needs a path to the .jsonl file (task.path=... or load_task('jsonl', path=...))"
        )
    return load_jsonl(path)


_SPECS = (
    TaskSpec("summeval", "summarization", summeval.ASPECTS, summeval.load, (summeval.FILE,), FORMATS),
    TaskSpec("newsroom", "summarization", newsroom.ASPECTS, newsroom.load, (newsroom.FILE,), FORMATS),
    TaskSpec(
        "topicalchat",
        "dialogue",
        dialogue.ASPECTS,
        dialogue.load_topicalchat,
        (dialogue.TOPICALCHAT_FILE,),
        FORMATS,
    ),
    TaskSpec(
        "usr_zepo", "dialogue", dialogue.ASPECTS, dialogue.load_usr_zepo, (dialogue.USR_ZEPO_FILE,), FORMATS
    ),
    TaskSpec("llmbar_natural", "instruction", (), llmbar.load_natural, (llmbar.NATURAL_FILE,)),
    TaskSpec("llmbar_mtbench", "instruction", (), llmbar.load_mtbench, (llmbar.MTBENCH_FILE,)),
    TaskSpec("arena_hard", "instruction", (), arena.load_arena_hard, arena.hard_files()),
    TaskSpec("arena_bench", "instruction", (arena.SCORE,), arena.load_arena_bench, arena.bench_files()),
    TaskSpec(JSONL, "summarization", (), _load_user_jsonl, ()),
)

TASKS: dict[str, TaskSpec] = {s.name: s for s in _SPECS}

# Pinned files no loader reads but a task's users want beside it (fetched with --only <name>).
EXTRA_FILES: dict[str, tuple[str, ...]] = {
    "zepo": ("zepo/init_prompts.json",),
    "arena_bench": ("arena-bench-v1/reference_answer/gpt-4.jsonl", "arena-bench-v1_config.yaml"),
}


def task_spec(name: str) -> TaskSpec:
    """TASKS[name], or a ConfigError listing the known names."""
    try:
        return TASKS[name]
    except KeyError:
        raise ConfigError(f"unknown task {name!r}; known: {', '.join(TASKS)}") from None
