"""The restriction: a shape's MILP over only the buildings DP-out fills, priced as the whole instance prices the same
layout, so its optimum is a feasible plan of the instance at the cost of a much smaller model."""

from __future__ import annotations

from dataclasses import replace

import pyomo.environ as pyo
import pytest

from scaleacross_milp.milp.context import shape_context
from scaleacross_milp.milp.extract import extract_plan
from scaleacross_milp.milp.formulation.build import build_model
from scaleacross_milp.milp.highs import HighsModel, model_size, restore
from scaleacross_milp.milp.path_cuts import solve_with_cuts
from scaleacross_milp.milp.patterns import layer_pace_s, restrictions
from scaleacross_milp.milp.routes import route_table
from scaleacross_milp.milp.screen import screen
from scaleacross_milp.milp.solve import ShapeSearch, climbing_order, degrees
from scaleacross_milp.milp.work import WorkClock
from scaleacross_milp.spec.plan import Shape, SolveStats
from scaleacross_milp.spec.topology import Topology
from scaleacross_milp.verify.verifier import verify

HALLS = [{"name": "A", "gpus": 32, "gpu_type": "h100"}, {"name": "B", "gpus": 16, "gpu_type": "h100"},
         {"name": "C", "gpus": 16, "gpu_type": "h100"}]
LINKS = [{"a": "A", "b": "B", "capacity_gbit_s": 400, "distance_km": 50},
         {"a": "B", "b": "C", "capacity_gbit_s": 400, "distance_km": 50}]


def test_routes_among_buildings_keep_the_whole_topology_s_paths():
    # A - B - C in a line: A to C still goes through B (both links), with every link index kept.
    routes = route_table(Topology(buildings=HALLS, links=LINKS))
    among = routes.among(["A", "C"])
    assert among.buildings == ["A", "C"] and among.links == routes.links
    assert among.arcs == {("A", "C"): [(0, 1), (1, 1)], ("C", "A"): [(1, -1), (0, -1)]}
    assert among.latency_s[("A", "C")] == pytest.approx(routes.latency_s[("A", "C")])


def test_restricted_optimum_equals_the_full_model_s_with_the_other_buildings_empty(tiny):
    # TP8 PP2 DP2 needs 32 GPUs: DP-out fills A alone. The restricted model over A and the full model with B and C
    # held empty are the same problem, so their optima agree to the solver's tolerance (each with its critical path
    # cut, as the search prices them: the full model's stream paths hold one the restricted model's rows do not).
    instance = tiny(buildings=HALLS, links=LINKS)
    shape = Shape(tp=8, pp=2, dp=2, micro_batch=1, microbatches=8)
    ctx = shape_context(instance, shape, route_table(instance.topology))
    assert restrictions(ctx)[0].buildings == ["A"]
    sub = replace(ctx, routes=ctx.routes.among(["A"]))
    restricted = solve_with_cuts(HighsModel(build_model(sub)), sub, time_limit_s=30, rel_gap=0.0, threads=1)
    full = build_model(ctx)
    for j in full.J:
        for k in ("B", "C"):
            full.x[j, k].fix(0)
            full.y[j, k].fix(0)
    held = solve_with_cuts(HighsModel(full), ctx, time_limit_s=30, rel_gap=0.0, threads=1)
    assert restricted.incumbent == pytest.approx(held.incumbent, rel=1e-6)


def searched_from_a_restriction(instance) -> ShapeSearch:
    """A search over `instance` whose incumbent is TP8 PP2 DP2's restriction (A alone)."""
    search = ShapeSearch(screen(instance, route_table(instance.topology)), WorkClock(60.0, 60.0), 60.0, 1e-4, 1)
    search.try_restriction(next(i for i, c in enumerate(search.candidates)
                                if c.shape.label().startswith("TP8 CP1 EP1 PP2 DP2 ")))
    return search


def incumbent_plan(search: ShapeSearch):
    """The search's incumbent as a plan (its values loaded back into its model)."""
    model = search.best.model.model
    restore(model, search.best.values)
    return extract_plan(model, search.best.ctx, SolveStats(status="optimal", incumbent_s=pyo.value(model.T),
                                                          bound_s=None, rel_gap=None, wall_s=0.0, shapes_total=1,
                                                          shapes_solved=1, shapes_pruned=0, **model_size(model)))


def test_the_search_takes_a_restriction_s_optimum_as_a_plan_the_verifier_replays(tiny):
    # The search keeps the restricted model's incumbent with its own context: the plan it extracts holds every stage
    # in A, and the verifier (on the whole instance) replays it at the MILP's time within its tolerance.
    instance = tiny(buildings=HALLS, links=LINKS)
    search = searched_from_a_restriction(instance)
    assert search.best is not None and search.best.ctx.buildings == ["A"]
    plan = incumbent_plan(search)
    assert {k for stage in plan.stages for k in stage.cells_per_building} == {"A"}
    verification, _ = verify(instance, plan)
    assert verification.iteration_s == pytest.approx(plan.prediction.iteration_s, rel=verification.tolerance)


def test_pp_out_gives_a_restriction_where_no_building_holds_a_pipeline(tiny):
    # Four 16-GPU halls in a line; TP8 PP4 DP1 is one 32-GPU pipeline: no hall holds it whole (no DP-out
    # restriction), but PP-out puts two stages in each of the first two halls, so the search solves the shape over
    # A and B alone and keeps a plan that leaves C and D idle.
    halls = [{"name": name, "gpus": 16, "gpu_type": "h100"} for name in "ABCD"]
    links = [{"a": a, "b": b, "capacity_gbit_s": 400, "distance_km": 50} for a, b in ("AB", "BC", "CD")]
    instance = tiny(buildings=halls, links=links, global_batch_sequences=8)
    shape = Shape(tp=8, pp=4, dp=1, micro_batch=1, microbatches=8)
    ctx = shape_context(instance, shape, route_table(instance.topology))
    assert [r.buildings for r in restrictions(ctx)] == [["A", "B"]]  # PP-out's alone: no hall holds a pipeline
    search = ShapeSearch(screen(instance, route_table(instance.topology)), WorkClock(60.0, 60.0), 60.0, 1e-4, 1)
    i = next(i for i, c in enumerate(search.candidates) if c.shape == shape)
    search.try_restriction(i)
    assert search.best is not None and search.best.ctx.buildings == ["A", "B"]


def test_a_shape_that_fits_a_flat_hall_is_also_restricted_to_it_beside_a_larger_hall_behind_pods(tiny):
    # The same GPUs in both halls: DP-out fills the larger hall first, where TP8 PP2 DP2's DDP groups cross its
    # 15x-oversubscribed pods of 8 GPUs; a layer costs less in the flat hall (compute and DP sync:
    # `patterns.layer_pace_s`), so the shape is also restricted to the flat hall, every pipeline in it.
    halls = [{"name": "pods", "gpus": 64, "gpu_type": "h100", "pod_gpus": 8, "oversubscription": 15},
             {"name": "flat", "gpus": 32, "gpu_type": "h100"}]
    links = [{"a": "pods", "b": "flat", "capacity_gbit_s": 400, "distance_km": 1}]
    instance = tiny(buildings=halls, links=links, search={"dp_modes": ["ddp"]})
    ctx = shape_context(instance, Shape(tp=8, pp=2, dp=2, micro_batch=1, microbatches=8),
                        route_table(instance.topology))
    assert layer_pace_s(ctx, "flat") < layer_pace_s(ctx, "pods")
    patterns = {tuple(r.buildings): r.patterns for r in restrictions(ctx)}
    assert patterns == {("pods",): [{(0, "pods"): 2, (1, "pods"): 2}], ("flat",): [{(0, "flat"): 2, (1, "flat"): 2}]}


def test_a_restriction_prices_only_the_links_its_routes_use(tiny):
    # A - B - C in a line: over A alone no route crosses a link, so no link is priced; over A and C the route runs
    # through B, so both links are, each under every transport it offers.
    instance = tiny(buildings=HALLS, links=LINKS)
    ctx = shape_context(instance, Shape(tp=8, pp=2, dp=2, micro_batch=1, microbatches=8),
                        route_table(instance.topology))
    alone = replace(ctx, routes=ctx.routes.among(["A"]))
    ends = replace(ctx, routes=ctx.routes.among(["A", "C"]))
    assert alone.price_lines == {} and alone.seconds_per_gb == {}
    assert {i for i, _, _ in ends.price_lines} == {0, 1}
    assert len(ends.price_lines) == sum(len(link.transports) for link in ctx.routes.links)


def test_a_plan_is_scaled_out_onto_the_least_bound_then_the_nearest_shape():
    # Shapes 5, 2, 7, 1 in queue order (least bound first) over 512, 256, 128 and 1,024 GPUs: the widest by bound
    # first, then the nearest (7, the fewest GPUs), then the rest by bound; none twice.
    gpus = {5: 512, 2: 256, 7: 128, 1: 1024}
    assert climbing_order([5, 2, 7, 1], gpus.__getitem__) == [5, 7, 2, 1]
    assert climbing_order([7, 2], gpus.__getitem__) == [7, 2]
    assert climbing_order([], gpus.__getitem__) == []


def test_scaling_out_an_incumbent_reaches_a_plan_over_every_building_that_the_verifier_replays(tiny):
    # The incumbent is TP8 PP2 DP2 in A (its restriction). Scaling it out prices its DP-out (TP8 PP2 DP4: whole
    # pipelines in B and C too) and PP-out (TP8 PP4 DP2: stages in blocks over A, B and C) layouts, each with its
    # cells held: the search keeps the better, a plan on all 64 GPUs that is faster and replays as priced.
    instance = tiny(buildings=HALLS, links=LINKS)
    search = searched_from_a_restriction(instance)
    restricted = search.best
    search.scale_out(restricted)
    assert search.best.ctx.shape.gpus == 64 and search.incumbent < restricted.objective
    assert restricted in search.superseded  # still a root the climb may scale out (`roots`)
    plan = incumbent_plan(search)
    assert {k for stage in plan.stages for k in stage.cells_per_building} == {"A", "B", "C"}
    verification, _ = verify(instance, plan)
    assert verification.iteration_s == pytest.approx(plan.prediction.iteration_s, rel=verification.tolerance)


def test_the_climb_scales_out_former_incumbents_near_the_incumbent_least_first(tiny):
    # The incumbent (TP8 PP2 DP2 in A) leads; former incumbents 3 % and 4 % above it follow, least first, each once;
    # one 20 % above is never a root. The caller marks each root's shape climbed, as `climb` does.
    instance = tiny(buildings=HALLS, links=LINKS)
    search = searched_from_a_restriction(instance)
    best = search.best
    others = [i for i, c in enumerate(search.candidates) if degrees(c.shape) != degrees(best.ctx.shape)][:3]
    near, nearer, far = (replace(best, objective=best.objective * factor, ctx=search.ctx(i))
                         for factor, i in zip((1.04, 1.03, 1.2), others, strict=True))
    search.superseded = [far, near, nearer]
    taken = []
    for root in search.roots():
        taken.append(root)
        search.climbed.add(degrees(root.ctx.shape))
    assert taken == [best, nearer, near]


def test_the_climb_scales_a_scaled_plan_out_before_solving_its_shape_s_restrictions(tiny, monkeypatch):
    # The incumbent (TP8 PP2 DP2 in A) scales out to a plan on a wider shape; the climb scales that plan out next,
    # and solves its shape's restrictions only once its own scale-out has not won (solved at once they took the
    # time of the next step out); a restriction that wins is climbed from again.
    instance = tiny(buildings=HALLS, links=LINKS)
    search = searched_from_a_restriction(instance)
    root = search.best
    wider = next(i for i, c in enumerate(search.candidates) if degrees(c.shape)[:4] == degrees(root.ctx.shape)[:4]
                 and c.shape.gpus > root.ctx.shape.gpus)
    scaled = replace(root, objective=0.9 * root.objective, index=wider, ctx=search.ctx(wider))
    refined = replace(scaled, objective=0.8 * root.objective)
    calls = []

    def scale_out(self, plan):
        calls.append(("scale out", plan.objective))
        if plan is root:
            self.best = scaled

    def try_restriction(self, i, *args, **kwargs):
        calls.append(("restriction", i))
        self.restrictions_tried.add(i)
        if i == wider:
            self.best = refined

    monkeypatch.setattr(ShapeSearch, "scale_out", scale_out)
    monkeypatch.setattr(ShapeSearch, "try_restriction", try_restriction)
    monkeypatch.setattr(ShapeSearch, "try_patterns", lambda self, i, *args, **kwargs: None)
    search.climb()
    assert calls[:4] == [("scale out", root.objective), ("scale out", scaled.objective), ("restriction", wider),
                         ("scale out", refined.objective)]


def test_a_restriction_keeps_only_the_pairs_its_own_buildings_can_hold(tiny):
    # Llama 3 8B under DDP without recompute: a PP 1 stage needs a B200's HBM on each of its eight TP 2 cells, which
    # A holds and B (H100) does not; a restriction to B would build a model HiGHS can only find infeasible
    instance = tiny(buildings=[{"name": "A", "gpus": 16, "gpu_type": "b200"},
                               {"name": "B", "gpus": 24, "gpu_type": "h100"}],
                    links=[{"a": "A", "b": "B", "capacity_gbit_s": 3200, "distance_km": 1}],
                    search={"dp_modes": ["ddp"], "schedules": ["1f1b"]}, recompute="none")
    ctx = shape_context(instance, Shape(tp=2, pp=1, dp=8, micro_batch=1, microbatches=2),
                        route_table(instance.topology))
    assert ctx.pairs
    assert ctx.held_pairs(["A"], ctx.pairs) == ctx.pairs
    assert ctx.held_pairs(["B"], ctx.pairs) == []


def test_a_plan_is_scaled_out_to_more_pipelines_with_stages_in_blocks_where_no_fast_building_holds_one(tiny):
    # TP8 PP4 DP1 fills 32 of A's 48 B200s. DP 2 needs 64 GPUs: DP-out's whole second pipeline fits only in C's
    # slower A100s, but with each stage whole in one building (PP-out's cells at DP 2) stages 0-2 fill A and
    # stage 3 fills B: both pipelines on B200s, about twice as fast as the incumbent.
    halls = [{"name": "A", "gpus": 48, "gpu_type": "b200"}, {"name": "B", "gpus": 16, "gpu_type": "b200"},
             {"name": "C", "gpus": 32, "gpu_type": "a100"}]
    links = [{"a": "A", "b": b, "capacity_gbit_s": 3200, "distance_km": 1} for b in "BC"]
    instance = tiny(buildings=halls, links=links, global_batch_sequences=32,
                    search={"tp_degrees": [8], "pp_degrees": [4], "schedules": ["1f1b"], "dp_modes": ["fsdp"]})
    search = ShapeSearch(screen(instance, route_table(instance.topology)), WorkClock(60.0, 60.0), 60.0, 1e-4, 1)
    search.try_restriction(next(i for i, c in enumerate(search.candidates)
                                if c.shape == Shape(tp=8, pp=4, dp=1, micro_batch=1, microbatches=32)))
    before = search.incumbent
    search.scale_out(search.best)
    assert search.best.ctx.shape.dp == 2 and search.incumbent < 0.6 * before
    plan = incumbent_plan(search)
    assert [sorted(stage.cells_per_building) for stage in plan.stages] == [["A"], ["A"], ["A"], ["B"]]
    verification, _ = verify(instance, plan)
    assert verification.iteration_s == pytest.approx(plan.prediction.iteration_s, rel=verification.tolerance)


def test_a_restriction_s_free_placement_waits_until_the_cheap_steps_are_done(tiny, monkeypatch):
    # try_restriction solves only the patterns' cells; the free-placement solve of the same restriction (a tenth of
    # the limit, rarely a better plan) is deferred to `free_placements`, which solves it on the kept model.
    instance = tiny(buildings=HALLS, links=LINKS)
    solved = []
    solve_cells = ShapeSearch.solve_cells

    def recording(self, i, cells, *args, **kwargs):
        solved.append((i, cells))
        return solve_cells(self, i, cells, *args, **kwargs)

    monkeypatch.setattr(ShapeSearch, "solve_cells", recording)
    search = searched_from_a_restriction(instance)
    i = search.best.index
    assert solved and all(cells is not None for _, cells in solved)
    assert search.placements_deferred == [(i, ("A",))]
    solved.clear()
    search.free_placements()
    assert solved == [(i, None)] and not search.placements_deferred
