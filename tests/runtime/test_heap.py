"""harness.heap: what a phase built and dropped goes back to the system, not only to malloc's free
lists (where it counts in the run's peak RSS to the end: about 170 MB after loading the Llama-3
tokenizer, docs/benchmarks.md)."""

from __future__ import annotations

import gc

import pytest

from harness.heap import _malloc_trim, release_freed_memory


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def fragmented_heap(mb: int = 96) -> list[bytes]:
    """`mb` MB of 2 KB buffers (malloc's, not Python's small-object allocator), all but one in 64
    freed: the free chunks lie between live ones, so free() alone returns none of them."""
    blocks = [bytes(2048) for _ in range(mb * 512)]
    return blocks[::64]


@pytest.mark.skipif(_malloc_trim() is None, reason="glibc's malloc_trim only")
def test_freed_heap_goes_back_to_the_system():
    """Negative control: after a garbage collection alone the freed pages still count."""
    before = rss_mb()
    kept = fragmented_heap()  # 96 MB built, 1.5 MB of it kept
    gc.collect()
    control = rss_mb()
    assert control - before > 48, f"control: of 96 MB freed, {control - before:.0f} MB still held"
    assert release_freed_memory()
    after = rss_mb()
    assert control - after > 48, f"{control:.0f} -> {after:.0f} MB"
    assert all(len(b) == 2048 for b in kept)  # the live buffers stay
