"""Batch throughput: a sweep of small scenarios on local spawned workers and on a local Ray instance.

    python benchmarks/batch_throughput.py [--count 200] [--workers 2] [--time-limit 2] [--no-ray]

The sweep varies the bundled `dp-out-2b-far-llama3-8b` (two 128-GPU H100 buildings) over link capacity scale x
distance, `--count` distinct scenarios, each solved with `--time-limit` and replayed. Per executor it prints the
wall time from pool start to summary written, scenarios per minute, the overhead per scenario beyond the solve,

    overhead = (workers x elapsed - sum of solve_instance wall times) / scenarios

(process start, shipping the job, usage and replay, writing the result file and the summary), the same beyond the
HiGHS time alone (adding screening and the Pyomo build), and the workers' resident memory over the sweep (mean of
the first and of the last tenth of the results, and the largest). Ray runs the same sweep into another folder with
`--workers` CPUs; its throughput is given as a ratio to the local one.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path

from scaleacross_milp.batch.local import LocalPool
from scaleacross_milp.batch.result import ScenarioResult, Status
from scaleacross_milp.batch.runner import run_batch
from scaleacross_milp.sweep.expand import Scenario, load_scenarios

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "instances" / "dp-out-2b-far-llama3-8b.json"


def sweep_scenarios(count: int, folder: Path) -> list[Scenario]:
    """`count` distinct scenarios: link_capacity_scale (20 values from 1/4 to 4) x link_distance_km."""
    scales = [round(0.25 * 16 ** (i / 19), 4) for i in range(20)]
    distances = [10 * (i + 1) for i in range(math.ceil(count / len(scales)))]
    path = folder / "sweep.json"
    path.write_text(json.dumps({"base": str(BASE), "grid": {"link_distance_km": distances,
                                                            "link_capacity_scale": scales}}))
    return load_scenarios(path)[0][:count]


def measure(name: str, make_pool, scenarios: list[Scenario], out: Path, workers: int, limit: float) -> float:
    """Run the sweep on a fresh pool, print its figures, return scenarios per minute."""
    start = time.perf_counter()
    with make_pool() as pool:
        report = run_batch(scenarios, out, pool, limit, retries=0)
    elapsed = time.perf_counter() - start
    results: list[ScenarioResult] = report.results
    solved = [r for r in results if r.status is Status.solved]
    solve_s = sum(r.plan.solve.wall_s for r in solved)
    highs_s = sum(r.plan.solve.solver_s for r in solved)
    n = len(results)
    rate = n / elapsed * 60
    tenth = max(1, n // 10)
    rss = [r.worker_rss_mib for r in results if r.worker_rss_mib is not None]
    print(f"{name}: {n} scenarios ({len(solved)} solved) in {elapsed:.1f} s on {workers} workers: "
          f"{rate:.1f} scenarios/min")
    print(f"  mean solve_instance {solve_s / max(1, len(solved)):.3f} s, of which HiGHS "
          f"{highs_s / max(1, len(solved)):.3f} s; mean worker time per scenario "
          f"{sum(r.wall_s for r in results) / n:.3f} s")
    print(f"  overhead beyond the solve: {(workers * elapsed - solve_s) / n:.3f} s per scenario; beyond HiGHS: "
          f"{(workers * elapsed - highs_s) / n:.3f} s")
    if rss:
        print(f"  worker RSS: first tenth {sum(rss[:tenth]) / len(rss[:tenth]):.0f} MiB, last tenth "
              f"{sum(rss[-tenth:]) / len(rss[-tenth:]):.0f} MiB, largest {max(rss):.0f} MiB")
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200, help="scenarios")
    parser.add_argument("--workers", type=int, default=2, help="local workers and Ray CPUs")
    parser.add_argument("--time-limit", type=float, default=2.0, help="seconds per scenario")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        scenarios = sweep_scenarios(args.count, folder)
        local = measure("local", lambda: LocalPool(args.workers), scenarios, folder / "local", args.workers,
                        args.time_limit)
        if not args.no_ray:
            from scaleacross_milp.batch.ray_cluster import LOCAL, RayPool

            ray = measure("ray", lambda: RayPool(LOCAL, cpus=args.workers), scenarios, folder / "ray", args.workers,
                          args.time_limit)
            print(f"Ray / local throughput: {ray / local:.2f}")


if __name__ == "__main__":
    main()
