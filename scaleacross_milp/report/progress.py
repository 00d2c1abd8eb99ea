"""Live progress of a solve on stderr (rich): shown once the solve has run a second, only on a terminal."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

from rich.console import Console
from rich.live import Live
from rich.text import Text

from scaleacross_milp.milp.progress import SearchProgress
from scaleacross_milp.report.summary import percent, seconds, usd

SHOW_AFTER_S = 1.0
"""A solve shorter than this shows nothing."""


def progress_line(p: SearchProgress, unit: Callable[[float | None], str] = seconds) -> str:
    """`shape MILPs  12.3 s  shapes 4 done / 37 left  incumbent 1.234 s  bound 1.100 s  gap 10.9 %`; incumbent and
    bound in `unit` (report.summary.usd under the cost objective)."""
    shapes = f"shapes {p.shapes_done:,} done / {p.shapes_left:,} left" if p.shapes_done or p.shapes_left else ""
    return "  ".join(part for part in (
        f"{p.phase.value:<11}", f"{p.elapsed_s:6.1f} s", shapes,
        f"incumbent {unit(p.incumbent_s)}" if p.incumbent_s is not None else "no plan yet",
        f"bound {unit(p.bound_s)}" if p.bound_s != float("inf") else "",
        f"gap {percent(p.gap)}" if p.gap is not None else "") if part)


class LiveProgress:
    """A `milp.progress.ProgressHook` drawing one transient line on stderr; inert when `enabled` is false or
    stderr is not a terminal. `cost`: the search minimises cost, so its incumbent and bound are dollars."""

    def __init__(self, enabled: bool = True, cost: bool = False) -> None:
        self.unit = usd if cost else seconds
        self.console = Console(stderr=True)
        self.enabled = enabled and self.console.is_terminal
        self.live: Live | None = None

    def __call__(self, p: SearchProgress) -> None:
        if not self.enabled or p.elapsed_s < SHOW_AFTER_S:
            return
        if self.live is None:
            self.live = Live(console=self.console, transient=True, auto_refresh=False)
            self.live.start()
        self.live.update(Text(progress_line(p, self.unit)), refresh=True)

    def __enter__(self) -> LiveProgress:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self.live is not None:
            self.live.stop()
