import gc
import weakref

import pytest

from scaleacross_milp import gcpause
from scaleacross_milp.gcpause import collect_if_grown, collect_left_cycles, paused_cycle_collection
from scaleacross_milp.milp.solve import solve_instance


def test_collector_paused_inside_and_restored_after_an_error():
    assert gc.isenabled()
    with pytest.raises(RuntimeError), paused_cycle_collection():
        assert not gc.isenabled()
        raise RuntimeError("build failed")
    assert gc.isenabled()


def test_a_collector_already_off_stays_off():
    gc.disable()
    try:
        with paused_cycle_collection():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


class _Node:
    def __init__(self) -> None:
        self.itself = self


def _generation_two_collections(action) -> int:
    """Full collections that start while `action()` runs."""
    started = []

    def record(phase: str, info: dict) -> None:
        if phase == "start" and info["generation"] == 2:
            started.append(info)

    gc.callbacks.append(record)
    try:
        action()
    finally:
        gc.callbacks.remove(record)
    return len(started)


def test_the_cycles_a_paused_block_left_are_collected_by_the_next_call_and_only_by_it():
    with paused_cycle_collection():
        node = _Node()
        left = weakref.ref(node)
        del node
    assert _generation_two_collections(collect_left_cycles) == 1
    assert left() is None
    assert _generation_two_collections(collect_left_cycles) == 0  # nothing paused since: no collection


def test_a_long_paused_block_collects_once_it_holds_more_than_grown_objects(monkeypatch):
    monkeypatch.setattr(gcpause, "GROWN_OBJECTS", 5_000)
    with paused_cycle_collection():
        gc.collect()  # the count starts at 0
        node = _Node()
        left = weakref.ref(node)
        del node
        assert _generation_two_collections(collect_if_grown) == 0  # one cycle held: below the threshold
        held = [[] for _ in range(6_000)]
        assert _generation_two_collections(collect_if_grown) == 1
        assert left() is None and len(held) == 6_000


def test_a_solve_runs_with_the_collector_paused(small_instance):
    instance = small_instance(gpus=16, batch=16, search_defaults={"time_limit_s": 5})
    seen = []
    solve_instance(instance, progress=lambda _: seen.append(gc.isenabled()))
    assert seen and not any(seen)
    assert gc.isenabled()


def test_what_a_paused_block_allocated_joins_the_oldest_generation():
    gc.collect()
    with paused_cycle_collection():
        held = [_Node() for _ in range(5_000)]
    assert gc.get_count()[0] < 700  # the next allocation triggers no collection of the block's objects
    assert any(node is held[0] for node in gc.get_objects(generation=2))
