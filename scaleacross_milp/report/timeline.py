"""Per-stage timeline (PNG): one row per simulated rank (and its comm stream) and per link direction, bars
coloured by operation kind; time in seconds."""

from __future__ import annotations

from typing import BinaryIO

from scaleacross_milp.verify.replay import Record

COLOURS = {"forward": "#4c72b0", "backward": "#dd8452", "backward-input": "#dd8452", "backward-weight": "#55a868",
           "send": "#8172b3", "dp": "#c44e52", "optimizer": "#937860"}
MAX_ROWS = 64


def draw_timeline(records: list[Record], handle: BinaryIO, title: str) -> None:
    """Write the timeline of `records` as PNG to an open binary file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    tracks = sorted({r.track for r in records}, key=lambda t: (t.startswith("link"), t.startswith("stage"), t))
    tracks = tracks[:MAX_ROWS]
    row = {t: i for i, t in enumerate(tracks)}
    fig, ax = plt.subplots(figsize=(14, 1.0 + 0.35 * len(tracks)))
    for category, colour in COLOURS.items():
        spans = [(r.start, r.finish - r.start, row[r.track]) for r in records
                 if r.category == category and r.track in row and r.finish > r.start]
        for start, width, y in spans:
            ax.broken_barh([(start, width)], (y - 0.4, 0.8), facecolors=colour, edgecolors="none")
    ax.set_yticks(range(len(tracks)), tracks, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time (s)")
    ax.set_title(title)
    used = {r.category for r in records}
    ax.legend(handles=[Patch(color=c, label=k) for k, c in COLOURS.items() if k in used], loc="upper left",
              bbox_to_anchor=(1.0, 1.0), fontsize=7)
    fig.tight_layout()
    fig.savefig(handle, format="png", dpi=110)
    plt.close(fig)
