"""What a collective is and how a ring moves it: the vocabulary calibration fits and the cost model prices with.

Collective on n ranks, payload S bytes (the full buffer: the all-reduce input, the all-gather output, the
reduce-scatter input, one rank's all-to-all send buffer), per-rank bandwidth B moves bandwidth_factor(n) S / B
and takes latency_steps(n) ring steps:
  all-reduce      2(n-1)/n,  2(n-1) steps     (ring)
  all-gather, reduce-scatter, all-to-all   (n-1)/n,  n-1 steps
  p2p             1,  1 step
"""

from __future__ import annotations

from typing import Literal, Protocol

Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p"]
Tier = Literal["nvlink", "fabric", "cross_building"]


class CollectiveModel(Protocol):
    """Anything that prices a collective; a calibrated table model can replace AlphaBetaModel."""

    def time_s(self, collective: Collective, tier: Tier, ranks: int, nbytes: float,
               ranks_per_node: int | None = None) -> float:
        """Seconds for `collective` over `ranks` ranks of `tier` on `nbytes`; `ranks_per_node` (fabric only) is
        how many of the group's ranks share a node (None: the group fills its nodes)."""
        ...


def bandwidth_factor(collective: Collective, n: int) -> float:
    """Multiple of S/B moved per rank: 2(n-1)/n all-reduce, (n-1)/n AG/RS/A2A, 1 p2p."""
    if collective == "p2p":
        return 1.0
    base = (n - 1) / n
    return 2 * base if collective == "all_reduce" else base


def latency_steps(collective: Collective, n: int) -> int:
    """Ring steps: 2(n-1) all-reduce, n-1 others, 1 p2p."""
    if collective == "p2p":
        return 1
    return 2 * (n - 1) if collective == "all_reduce" else n - 1
