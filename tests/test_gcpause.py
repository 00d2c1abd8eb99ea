import gc

import pytest

from scaleacross_milp.gcpause import paused_cycle_collection


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
