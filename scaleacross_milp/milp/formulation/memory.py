"""Per-GPU memory: activations in flight under the schedule plus states under the DP variant fit in HBM.

    act[j]   >= (n[j] a + moe_excess[j] a') inflight_o(j) - M (1 - u[o])     a: activation GB per layer per
                                                              microbatch
    state[j] >= n[j] s_v + moe_excess[j] s'_v + f_v(j) + l_v H[j] - M (1 - w[v])   s_v: weights+grads+optimizer GB
                                                              per layer, f_v(j) FSDP buffers + embedding (stage 0),
                                                              l_v the LM head and logits on the stage H[j] of
                                                              `chosen` runs it on
(a', s'_v: what an MoE layer holds beyond a dense one, times its MoE layers beyond the average share, `layer_kinds`)
    act[j] + state[j] <= HBM_k + M (1 - y[j,k])                for every building k that may hold stage j
"""

from __future__ import annotations

import pyomo.environ as pyo

from scaleacross_milp.milp.context import ShapeContext
from scaleacross_milp.milp.formulation.chosen import head_on
from scaleacross_milp.milp.formulation.disjunction import add_rows, choice_lower_bounds
from scaleacross_milp.milp.formulation.layer_kinds import excess_terms

GB = 1e9


def fixed_state_gb(ctx: ShapeContext, j: int, v: int) -> float:
    """f_v(j): GB every GPU of stage j holds whatever its layers, but the LM head: FSDP's transient buffers and the
    embedding on stage 0."""
    variant, costs = ctx.variants[v], ctx.costs
    gb = costs.stage_fixed_bytes.get(variant, 0.0)
    if j == 0:
        gb += costs.first_stage_fixed_bytes[variant]
    return gb / GB


def add_memory(m: pyo.ConcreteModel, ctx: ShapeContext) -> None:
    p, mb, costs = ctx.shape.pp, ctx.shape.microbatches, ctx.costs
    most = ctx.instance.model_spec.layers - p + 1
    act = costs.activation_bytes_per_layer / GB
    act_excess = ctx.kind_excess(lambda kind: kind.activation_bytes_per_layer) / GB
    inflight = {(o, j): opt.inflight_microbatches(p, j, mb) for o, opt in enumerate(ctx.options) for j in range(p)}
    state = {v: costs.layer_state_bytes[var] / GB for v, var in enumerate(ctx.variants)}
    state_excess = {v: ctx.kind_excess(lambda kind, var=var: kind.layer_state_bytes[var]) / GB
                    for v, var in enumerate(ctx.variants)}
    act_max = most * (act + act_excess.most) * max(inflight.values())
    head = [costs.last_stage_fixed_bytes[var] / GB for var in ctx.variants]
    state_max = max(most * (state[v] + state_excess[v].most) + fixed_state_gb(ctx, j, v) + head[v]
                    for v in m.V for j in m.J)

    m.act = pyo.Var(m.J, domain=pyo.NonNegativeReals)
    m.state = pyo.Var(m.J, domain=pyo.NonNegativeReals)
    options, variants = list(m.O), list(m.V)
    rows = []
    for j in m.J:
        per_option = [act * inflight[o, j] for o in options]
        rows += choice_lower_bounds(m.act[j], [(per_option, m.n[j]),
                                               *excess_terms(m, j, [act_excess * inflight[o, j] for o in options])],
                                    m.u, options, act_max)
        terms = [([state[v] for v in variants], m.n[j]), *excess_terms(m, j, [state_excess[v] for v in variants])]
        if ctx.head_options(j):
            terms.append((head, head_on(m, ctx, j)))
        rows += choice_lower_bounds(m.state[j], terms, m.w, variants, state_max,
                                    constant=[fixed_state_gb(ctx, j, v) for v in variants])
    add_rows(m, "memory_use", rows)

    def fits(m, j, k):
        hbm = ctx.gpu(k).hbm_usable_bytes / GB
        return m.act[j] + m.state[j] <= hbm + (act_max + state_max) * (1 - m.y[j, k])

    m.fits = pyo.Constraint(m.J, m.K, rule=fits)
