"""A CollectiveModel backed by a calibrated Profile (the tables at full resolution).

time_s(collective, tier, n, S) for a tier the profile measures (nvlink, fabric):
  curve  the (collective, tier) curve whose rank count n0 is nearest n in ratio (|log n/n0|; ties: larger n0)
  S'     S * factor(n) / factor(n0) * k0 / min(k, k0): the size at which n0 ranks move as many bytes per rank
         as n ranks do with S (factor: 2(n-1)/n all-reduce, (n-1)/n all-gather / reduce-scatter / all-to-all,
         1 p2p), times, on the fabric, the measured ranks per node k0 = n0/nodes0 over the caller's k
         (ranks_per_node; None = k0): a node's network bandwidth is one NIC per GPU of the group on it (rail
         aligned), so a group with 1 rank per node gets 1/k0 of the bus bandwidth measured with k0 per node
  T0(S') log-log interpolation between measured sizes (log t linear in log S); outside them the fitted
         bandwidth continues from the end point: T_last + (S' - S_last) * k above, T_first - (S_first - S') * k
         below but not under min(alpha0, T_first), with k = factor(n0) / B0 the fit's seconds per byte
  t      max(T0(S') + alpha0 * (steps(n)/steps(n0) - 1), alpha0 * steps(n)/steps(n0)): the fitted latency
         scaled by ring steps (2(n-1) all-reduce, n-1 others, 1 p2p), never below that latency
cross_building: no log measures it (no nccl-tests run spans buildings), so it is derived, not measured: the
  fabric fit of the collective at n ranks, alpha0 * steps(n)/steps(n0) + factor(n) * S / B0 * k0/min(k, k0)
  (k defaults to 1 rank per node here), plus `cross_building_alpha_s` per ring step (the link's one-way
  latency); the link's own capacity, load balance and loss are applied by costmodel.network, as for
  AlphaBetaModel.
A (collective, tier) the profile lacks is priced by `fallback`. n <= 1 (except p2p) or S <= 0 costs 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from scaleacross_milp.calibration.collective import Collective, CollectiveModel, Tier, bandwidth_factor, latency_steps
from scaleacross_milp.calibration.profile import Curve, Profile


@dataclass(frozen=True)
class _Table:
    curve: Curve
    log_bytes: np.ndarray
    log_time: np.ndarray

    @classmethod
    def of(cls, curve: Curve) -> _Table:
        return cls(curve, np.log([p.bytes for p in curve.points]), np.log([p.time_s for p in curve.points]))

    @property
    def seconds_per_byte(self) -> float:
        return bandwidth_factor(self.curve.collective, self.curve.ranks) / self.curve.bus_bandwidth_bytes_s

    def interpolate(self, nbytes: float) -> float:
        """T0(S): log-log inside the measured sizes, the fitted slope outside (module docstring)."""
        first, last = self.curve.points[0], self.curve.points[-1]
        if nbytes > last.bytes:
            return last.time_s + (nbytes - last.bytes) * self.seconds_per_byte
        if nbytes < first.bytes:
            floor = min(self.curve.alpha_s, first.time_s)
            return max(floor, first.time_s - (first.bytes - nbytes) * self.seconds_per_byte)
        return float(np.exp(np.interp(math.log(nbytes), self.log_bytes, self.log_time)))


class ProfileCollectiveModel:
    """CollectiveModel from a Profile; see the module docstring for the formulas."""

    def __init__(self, profile: Profile, fallback: CollectiveModel | None = None,
                 cross_building_alpha_s: float = 0.0) -> None:
        self.profile, self.fallback, self.cross_building_alpha_s = profile, fallback, cross_building_alpha_s
        self._tables: dict[tuple[str, str], list[_Table]] = {}
        self._times: dict[tuple[Collective, Tier, int, float, int | None], float] = {}
        for curve in profile.curves:
            self._tables.setdefault((curve.collective, curve.tier), []).append(_Table.of(curve))

    def covers(self, collective: Collective, tier: Tier) -> bool:
        """True when the profile prices (collective, tier) itself (cross_building: from the fabric curves)."""
        return (collective, "fabric" if tier == "cross_building" else tier) in self._tables

    def curve_for(self, collective: Collective, tier: Tier, ranks: int) -> Curve:
        """The measured curve used for `ranks` (nearest rank count in ratio); KeyError if none."""
        return self._table(collective, tier, ranks).curve

    def _table(self, collective: Collective, tier: Tier, ranks: int) -> _Table:
        tables = self._tables[(collective, "fabric" if tier == "cross_building" else tier)]
        return min(tables, key=lambda t: (abs(math.log(max(ranks, 2) / t.curve.ranks)), -t.curve.ranks))

    @staticmethod
    def size_scale(curve: Curve, ranks: int, ranks_per_node: int | None) -> float:
        """S'/S = factor(n)/factor(n0) * k0/min(k, k0) (module docstring)."""
        scale = bandwidth_factor(curve.collective, ranks) / bandwidth_factor(curve.collective, curve.ranks)
        if curve.tier == "fabric" and curve.collective != "p2p" and curve.nodes and ranks_per_node:
            measured_per_node = curve.ranks / curve.nodes
            scale *= measured_per_node / min(ranks_per_node, measured_per_node)
        return scale

    def measured_bytes(self, collective: Collective, tier: Tier, ranks: int,
                       ranks_per_node: int | None = None) -> tuple[float, ...]:
        """Sizes S (at `ranks`) where the curve has a breakpoint: the measured sizes mapped back through S'.
        Empty when the curve is linear (cross_building) or priced by the fallback."""
        if tier == "cross_building" or not self.covers(collective, tier):
            return ()
        curve = self._table(collective, tier, ranks).curve
        scale = self.size_scale(curve, ranks, ranks_per_node)
        return tuple(p.bytes / scale for p in curve.points)

    def time_s(self, collective: Collective, tier: Tier, ranks: int, nbytes: float,
               ranks_per_node: int | None = None) -> float:
        """The collective's time (module docstring), priced once per argument tuple: the shapes of an instance
        share one model and ask for the same collectives again and again."""
        key = (collective, tier, ranks, nbytes, ranks_per_node)
        if key not in self._times:
            self._times[key] = self._price(collective, tier, ranks, nbytes, ranks_per_node)
        return self._times[key]

    def _price(self, collective: Collective, tier: Tier, ranks: int, nbytes: float,
               ranks_per_node: int | None) -> float:
        if (ranks <= 1 and collective != "p2p") or nbytes <= 0:
            return 0.0
        if not self.covers(collective, tier):
            if self.fallback is None:
                raise KeyError(f"profile '{self.profile.name}' has no {collective} curve on {tier} and no fallback")
            return self.fallback.time_s(collective, tier, ranks, nbytes, ranks_per_node)
        table = self._table(collective, tier, ranks)
        curve = table.curve
        steps = latency_steps(collective, ranks)
        latency = curve.alpha_s * steps / latency_steps(collective, curve.ranks)
        if tier == "cross_building":
            moved = nbytes * self.size_scale(curve, ranks, ranks_per_node or 1)
            return latency + steps * self.cross_building_alpha_s + moved * table.seconds_per_byte
        measured = table.interpolate(nbytes * self.size_scale(curve, ranks, ranks_per_node))
        return max(measured + latency - curve.alpha_s, latency)
