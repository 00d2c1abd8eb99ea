"""Ray execution against a local Ray instance the test starts and stops itself (2 CPUs): results streamed back,
an overrunning task cancelled by force, a crashed worker reported, a real scenario solved. Skipped only when Ray
is not installed (CI installs the `ray` extra)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scaleacross_milp.batch.ray_cluster import RayPool
from scaleacross_milp.batch.result import Status
from scaleacross_milp.batch.runner import run_batch
from scaleacross_milp.sweep.expand import load_scenarios
from tests.batch.hooks import scripted

ray = pytest.importorskip("ray")
ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "instances" / "dp-out-2b-far-llama3-8b.json"


@pytest.fixture
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False)
    yield
    ray.shutdown()


def test_ray_kills_a_hang_reports_a_crash_and_solves_the_rest(tmp_path, local_ray):
    """The hang's own limit is 0.5 s: cancelled (force=True) at 1 s; the others have 30 s, a ceiling only (they
    finish in seconds, but a cold Ray worker on a loaded machine must not be killed)."""
    cases = [{"description": action, "buildings": 1, "search.time_limit_s": 0.5 if action == "hang" else 30.0}
             for action in ("hang", "crash", "")]
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps({"base": str(BASE), "cases": cases}))
    hang, crash, real = load_scenarios(sweep)[0]
    with RayPool("auto", scripted) as pool:
        assert pool.slots == 2 and not pool.owned
        report = run_batch([hang, crash, real], tmp_path / "results", pool, retries=0)
    found = {r.id: r for r in report.results}
    assert found[hang.id].status is Status.timed_out
    assert "past the hard limit of 1 s (2 x its 0.5 s time limit): killed" in found[hang.id].reason
    assert found[crash.id].status is Status.crashed
    assert found[crash.id].reason.startswith("the Ray task failed: WorkerCrashedError")
    assert found[real.id].status is Status.solved and found[real.id].plan.verification is not None
    assert ray.is_initialized()  # the pool leaves alone the instance it did not start
