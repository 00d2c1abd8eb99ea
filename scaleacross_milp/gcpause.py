"""Pausing Python's cyclic garbage collector around work that allocates many long-lived objects."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_cycles_left = False
"""Whether a paused block ran since the last `collect_left_cycles`."""


@contextmanager
def paused_cycle_collection() -> Iterator[None]:
    """Pause the cyclic collector inside the block. Automatic collections are triggered by allocation counts, and each
    older-generation one rescans every object alive, though what such a block allocates stays alive: a replay's
    10^5 graph nodes and records (40 % of a 448-microbatch replay), a shape's Pyomo model (1.30 s -> 0.36 s for the
    131k-GPU Llama 3 405B instance's eight-building PP 32 model). Reference counting still frees what the block
    drops; cycles it leaves are collected by the first full collection after it, or by `collect_left_cycles`.

    On leaving, what the block allocated joins the oldest generation (`gc.freeze` then `gc.unfreeze`, two list
    splices): left in the youngest, the first allocation after the block would rescan all of it at once (0.5-0.9 s
    after a 5 s solve, inside its caller's clock), and what such a block leaves alive is long-lived anyway."""
    global _cycles_left
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        _cycles_left = True
        if enabled:
            gc.freeze()
            gc.unfreeze()
            gc.enable()


def collect_left_cycles() -> None:
    """Collect what paused blocks left since the last call (nothing to do in a process that ran none). A solve calls
    it before its clock starts: a solve leaves its Pyomo models as about 500,000 objects of cyclic garbage, and left
    to the automatic collections they are rescanned inside the next solve's time limit, which then reaches fewer
    steps (generated medium seed 17 after seed 16 in one process: 0.24 s more to its first model, a 3.73 s plan
    instead of 1.09 s; 0.3 s to collect them here)."""
    global _cycles_left
    if _cycles_left:
        gc.collect()
        _cycles_left = False


GROWN_OBJECTS = 10_000_000
"""Objects allocated and still held since the last collection (`gc.get_count`, net of those freed) past which a
long paused block collects (`collect_if_grown`): about 1 GB at 90 bytes an object."""


def collect_if_grown() -> None:
    """Collect inside a paused block once it holds GROWN_OBJECTS more objects than at the last collection, so that
    the cycles it drops do not grow without bound; a count of objects, not of seconds, so runs take the same steps."""
    if gc.get_count()[0] > GROWN_OBJECTS:
        gc.collect()
