"""Fit-quality tables (rich) for a profile: per curve the error at each measured size, then a summary."""

from __future__ import annotations

from rich.box import SIMPLE_HEAD
from rich.console import Console
from rich.table import Table

from scaleacross_milp.calibration.profile import Curve, Profile


def size_text(nbytes: float) -> str:
    """Bytes with a binary unit: 8 B, 32 KiB, 1.5 GiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{nbytes:.0f} B"


def curve_title(curve: Curve) -> str:
    nodes = f", {curve.nodes} node{'s' if curve.nodes != 1 else ''}" if curve.nodes else ""
    return (f"{curve.collective} on {curve.tier}, {curve.ranks} ranks{nodes}: alpha {curve.alpha_s * 1e6:.1f} us, "
            f"bus bandwidth {curve.bus_bandwidth_bytes_s / 1e9:.1f} GB/s")


def curve_table(curve: Curve) -> Table:
    """Measured and fitted time and the fit's relative error at every measured size."""
    table = Table(title=curve_title(curve), title_justify="left", box=SIMPLE_HEAD)
    for header in ("size", "measured", "fit", "fit error"):
        table.add_column(header, justify="right")
    for point in curve.points:
        fitted = point.time_s * (1 + point.fit_rel_error)
        table.add_row(size_text(point.bytes), f"{point.time_s * 1e6:,.1f} us", f"{fitted * 1e6:,.1f} us",
                      f"{point.fit_rel_error:+.1%}")
    return table


def summary_table(profile: Profile) -> Table:
    """One row per curve: where it was measured, the fit and its largest |relative error| (fits 80 columns)."""
    title = (f"Profile {profile.name} ({profile.gpu_model}): ranks (nodes); "
             "max err = largest |fit - measured| / measured")
    table = Table(title=title, title_justify="left", box=SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for header in ("collective", "tier", "ranks", "sizes", "alpha", "bus bw", "max err"):
        table.add_column(header, justify="left" if header in ("collective", "tier") else "right", no_wrap=True)
    for curve in profile.curves:
        table.add_row(curve.collective, curve.tier, f"{curve.ranks} ({curve.nodes or '?'})",
                      "-".join(size_text(p.bytes).replace(" ", "") for p in (curve.points[0], curve.points[-1])),
                      f"{curve.alpha_s * 1e6:.3g} us", f"{curve.bus_bandwidth_bytes_s / 1e9:.1f} GB/s",
                      f"{curve.max_abs_fit_rel_error:.1%}")
    return table


def render_fit(profile: Profile, out: Console, detail: bool = True) -> None:
    if detail:
        for curve in profile.curves:
            out.print(curve_table(curve))
    out.print(summary_table(profile))
