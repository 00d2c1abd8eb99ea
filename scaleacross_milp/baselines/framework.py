"""The framework baseline: torchtitan's default device mesh [pp, dp, cp, tp], PP outermost.

GPU ranks are numbered building by building in instance order (a building's GPUs beyond a whole number of stage
cells, tp x cp x ep GPUs, are left out so that no cell spans buildings) and stage j owns ranks [j S, (j+1) S),
S = dp x cp x tp: the global cell slots [j C, (j+1) C), C = dp / ep cells per stage. A stage's cells are thus
split across buildings wherever the blocks fall, and pipeline i (the ep replicas of cell i) goes through cell i of
every stage. 1F1B, FSDP with reshard after forward, each link's first ECMP transport; TP, EP, PP, DP and
micro-batch chosen by the production rule (production.smallest_fitting) with this placement's room:
floor(sum_k floor(G_k / cell GPUs) / pp) cells per stage.
"""

from __future__ import annotations

from collections import Counter

from scaleacross_milp.baselines.pricing import priced
from scaleacross_milp.baselines.production import even_split, smallest_fitting
from scaleacross_milp.baselines.result import BaselineResult, Kind
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.plan import Layout, PipelineRoute, Shape, StagePlacement
from scaleacross_milp.spec.search import DPMode, Schedule


def cell_slots(instance: Instance, cell_gpus: int) -> list[str]:
    """The building of each global cell slot, building by building in instance order."""
    return [b.name for b in instance.topology.buildings for _ in range(b.gpus // cell_gpus)]


def contiguous_room(instance: Instance, cell_gpus: int, pp: int) -> int:
    return len(cell_slots(instance, cell_gpus)) // pp


def framework_layout(instance: Instance, shape: Shape, notes: list[str]) -> Layout:
    """Stage j on cell slots [j C, (j+1) C); pipeline i through slot j C + i of every stage j."""
    slots, cells = cell_slots(instance, shape.cell_gpus), shape.cells_per_stage
    split = even_split(instance.model_spec.layers, shape.pp, 1)
    blocks = [slots[j * cells:(j + 1) * cells] for j in range(shape.pp)]
    stages = [StagePlacement(stage=j, layers=n, cells_per_building=dict(Counter(block)))
              for j, (n, block) in enumerate(zip(split, blocks, strict=True))]
    routes = Counter(tuple(block[i] for block in blocks) for i in range(cells))
    pipelines = [PipelineRoute(buildings=list(route), pipelines=n * shape.ep) for route, n in sorted(routes.items())]
    return Layout(instance=instance.name, shape=shape, schedule=Schedule.one_f_one_b, dp_mode=DPMode.fsdp,
                  stages=stages, pipelines=pipelines)


def framework(instance: Instance) -> BaselineResult:
    notes: list[str] = []
    layout = smallest_fitting(instance, contiguous_room, framework_layout, notes)
    return priced(Kind.framework, instance, layout, notes)
