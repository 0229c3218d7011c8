"""Progress bars that never sit silent: the decoding step between ticks, and a heartbeat that
redraws a bar while one long forward runs: no phase stays silent longer than 10 s.

A tqdm bar redraws only when it is updated, so a bar whose next tick is a minute away (an 8B
judge's prefill of a batch, a local optimizer's long reply) shows a frozen elapsed time and
rate. `heartbeat` redraws it from a daemon thread every few seconds (torch releases the GIL
while it computes); `show_step` puts the decoding step in its postfix.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any


def counted(n: int, noun: str) -> str:
    """ "1 document", "3 documents": a count with its noun in the right number (an -s plural)."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


HEARTBEAT_S = 5.0
"""Seconds between redraws of a bar that nothing updated: half the 10 s a phase may stay silent."""


@contextlib.contextmanager
def heartbeat(bar: Any, every: float = HEARTBEAT_S) -> Iterator[Any]:
    """Redraw `bar` every `every` seconds while the block runs (a disabled bar: nothing)."""
    if getattr(bar, "disable", True) or not hasattr(bar, "refresh"):
        yield bar
        return
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every):
            bar.refresh()  # tqdm takes its own lock, as update() does from the main thread

    thread = threading.Thread(target=beat, name="harness-progress", daemon=True)
    thread.start()
    try:
        yield bar
    finally:
        stop.set()
        thread.join()


def show_step(progress: Any, step: int, steps: int) -> None:
    """The decoding step in the bar's postfix (step 0: the prompt), redrawn once the bar's
    `mininterval` has passed since it last drew: the sign of life between two finished rows
    (tqdm's update(0) is no such sign: its dynamic `miniters` can swallow it)."""
    set_postfix = getattr(progress, "set_postfix_str", None)
    if set_postfix is not None:
        due = time.time() - getattr(progress, "last_print_t", 0.0) >= getattr(progress, "mininterval", 0.0)
        set_postfix(f"step {step}/{steps}", refresh=due)  # tqdm's clock is time.time
