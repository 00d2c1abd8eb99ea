"""Parser for nccl-tests output (`all_reduce_perf`, `all_gather_perf`, `reduce_scatter_perf`, `alltoall_perf`,
`sendrecv_perf`) exactly as the tool prints it.

What is read (nccl-tests `common.cu`: print_header / the per-size result line):
- `# nThread T nGpus G minBytes ...`: threads and GPUs per process;
- `#  Rank  r Group  g Pid  p on HOST device  d [bus] GPU NAME`: one line per rank (ranks, hosts, GPU name);
- the table header `# size count type redop root time algbw busbw #wrong time algbw busbw #wrong` (column
  names are read from the header, so older layouts without `redop` / `root` or with `error` instead of
  `#wrong` parse too), its units line `# (B) (elements) (us) (GB/s) ...`, then one row per size: the
  out-of-place and, when printed, the in-place time (us), algbw and busbw (GB/s); `N/A` marks an unmeasured cell;
- `# Avg bus bandwidth : X`, `# Collective test starting: NAME_perf` and a command line naming `NAME_perf`;
- `# nccl-tests version V nccl-headers=H nccl-library=L`: the NCCL library the run used (L = major*10000 +
  minor*100 + patch, NCCL_VERSION_CODE since 2.9: 22902 is 2.29.2).
A launcher prefix repeated on every line (`0: ` from srun -l, `[1,0]<stdout>:` from mpirun --tag-output) is
stripped; other lines (markdown, shell echo) outside a table are ignored; every `#` line is a comment.

Facts the format implies are inferred here; anything it cannot say is left None for the caller to supply:
- collective: the named `NAME_perf`; unnamed, from the row arithmetic busbw = algbw * factor(n) and
  size = count * element size (* n for reduce-scatter/all-gather/all-to-all): factor 1 with full count is
  sendrecv, factor 2(n-1)/n with full count all-reduce, a 1/n count with `sum` reduce-scatter;
- ranks: the number of `Rank` lines, else size/(count*element size) (all-gather, reduce-scatter, all-to-all),
  else the unique integer n whose factor(n) matches busbw/algbw within the printed rounding (all-reduce);
- nodes: distinct hosts of the `Rank` lines, else 1 when one process drives every rank (nThread*nGpus = ranks).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from scaleacross_milp.calibration.collective import Collective

PERF_NAMES: dict[str, Collective] = {
    "all_reduce": "all_reduce",
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "alltoall": "all_to_all",
    "sendrecv": "p2p",
}
"""nccl-tests binary name (without `_perf`) -> our collective name."""
ELEMENT_BYTES = {
    "int8": 1, "uint8": 1, "char": 1, "f8e4m3": 1, "f8e5m2": 1, "half": 2, "bfloat16": 2, "int32": 4,
    "uint32": 4, "int": 4, "float": 4, "int64": 8, "uint64": 8, "double": 8,
}
PRINT_ROUNDING_GBYTE_S = 0.005
"""algbw and busbw are printed with two decimals (GB/s)."""

_PREFIX = re.compile(r"^(?:\d+:\s?|\[\d+,\d+\]<std(?:out|err)>:)")
_RANK = re.compile(r"^#\s*Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s*(.*)$")
_THREADS = re.compile(r"^#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)\b")
_STARTING = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_AVG_BUSBW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)")
_NCCL_LIBRARY = re.compile(r"^#\s*nccl-tests version\s+\S+.*\bnccl-library=(\d+)")
_PERF_TOKEN = re.compile(r"(?:^|[/\s])(\w+)_perf\b")
_SIZE_COLUMNS = ("size", "bytes")
_COUNT_COLUMNS = ("count", "N")


class LogError(ValueError):
    """A problem in a log, located by file and 1-based line number."""

    def __init__(self, file: str | Path, line: int, message: str) -> None:
        super().__init__(f"{file}:{line}: {message}")
        self.file, self.line, self.message = str(file), line, message


@dataclass(frozen=True)
class Row:
    """One measured size. Times in seconds, bandwidths in GB/s as printed; None where the cell is N/A or the
    column is absent (no in-place columns)."""

    line: int
    bytes: int
    count: int
    dtype: str
    redop: str
    out_of_place_s: float | None
    in_place_s: float | None
    algbw_gbyte_s: float | None
    busbw_gbyte_s: float | None

    @property
    def time_s(self) -> float:
        """The faster of the out-of-place and in-place times: both time the same collective on the same size,
        so a slower one is a spike (e.g. DGX H100 32 B: 68.1 us out-of-place, 13.5 us in-place), not cost."""
        return min(t for t in (self.out_of_place_s, self.in_place_s) if t is not None)


@dataclass(frozen=True)
class Test:
    """One results table with what the log says about its run."""

    file: str
    line: int
    collective: Collective | None
    ranks: int | None
    nodes: int | None
    gpu_name: str | None
    rows: tuple[Row, ...]
    avg_busbw_gbyte_s: float | None = None
    nccl_version: str | None = None


@dataclass
class _Run:
    """Context lines seen before a table (reset by a new `nThread` or `Collective test starting` line, which keep
    the collective's name and the NCCL version printed before them)."""

    perf_name: tuple[str, int] | None = None
    nccl_version: str | None = None
    threads_gpus: int | None = None
    rank_hosts: dict[int, str] = field(default_factory=dict)
    gpu_names: list[str] = field(default_factory=list)


@dataclass
class _Table:
    line: int
    columns: list[str]
    run: _Run
    rows: list[Row] = field(default_factory=list)
    avg_busbw: float | None = None


def parse_log(path: str | Path) -> list[Test]:
    """Every results table in the file at `path`; LogError if it is unreadable or not nccl-tests output."""
    path = Path(path)
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise LogError(path, 0, f"cannot read ({exc.strerror})") from None
    return parse_text(text, str(path))


def parse_text(text: str, file: str = "<text>") -> list[Test]:
    """Every results table in `text` (named `file` in errors), in order."""
    lines = text.splitlines()
    run, table, tables = _Run(), None, []
    for number, raw in enumerate(lines, start=1):
        body = _PREFIX.sub("", raw, count=1).strip()
        if table is not None and body.startswith("#") and "(B)" in body and not table.rows:
            continue  # the units line under the header
        if table is not None and (not body or body.startswith("#")):
            tables.append(table)
            table = None
        if not body:
            continue
        if body.startswith("#"):
            header = _header_columns(body)
            if header is not None:
                table = _Table(number, header, run)
                continue
            run = _context_line(body, number, file, run, tables)
            continue
        if table is not None:
            table.rows.append(_row(body, number, file, table.columns))
            continue
        perf = _PERF_TOKEN.search(body)
        if perf:
            run = _Run(perf_name=(perf.group(1), number))
    if table is not None:
        tables.append(table)
    if not tables:
        raise LogError(file, len(lines), "not nccl-tests output: reached the end without a results table "
                       "(a '#  size  count  type ... time  algbw  busbw' header)")
    return [_test(t, file) for t in tables]


def _header_columns(body: str) -> list[str] | None:
    tokens = body.lstrip("#").split()
    if tokens and tokens[0] in _SIZE_COLUMNS and {"time", "algbw", "busbw"} <= set(tokens):
        return tokens
    return None


def _context_line(body: str, number: int, file: str, run: _Run, tables: list[_Table]) -> _Run:
    if m := _NCCL_LIBRARY.match(body):
        return _Run(nccl_version=_nccl_version(int(m.group(1))))
    if m := _STARTING.match(body):
        return _Run(perf_name=(m.group(1).removesuffix("_perf"), number), nccl_version=run.nccl_version)
    if m := _THREADS.match(body):
        return _Run(perf_name=run.perf_name, nccl_version=run.nccl_version,
                    threads_gpus=int(m.group(1)) * int(m.group(2)))
    if m := _RANK.match(body):
        run.rank_hosts[int(m.group(1))] = m.group(2)
        run.gpu_names.append(m.group(3).strip())
    elif (m := _AVG_BUSBW.match(body)) and tables:
        tables[-1].avg_busbw = _number(m.group(1), number, file, "Avg bus bandwidth")
    return run


def _nccl_version(code: int) -> str:
    """NCCL_VERSION_CODE -> "major.minor.patch": major*10000 + minor*100 + patch (since 2.9), else
    major*1000 + minor*100 + patch."""
    if code >= 20900:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def _number(cell: str, number: int, file: str, column: str) -> float:
    try:
        value = float(cell)
    except ValueError:
        raise LogError(file, number, f"column '{column}': expected a number, found '{cell}'") from None
    if not math.isfinite(value):
        raise LogError(file, number, f"column '{column}': expected a finite number, found '{cell}'")
    return value


def _row(body: str, number: int, file: str, columns: list[str]) -> Row:
    cells = body.split()
    if len(cells) != len(columns):
        raise LogError(file, number, f"truncated or malformed row: {len(cells)} cells, the header has "
                       f"{len(columns)} ({' '.join(columns)})")
    named: dict[str, list[str]] = {}
    for name, cell in zip(columns, cells, strict=True):
        named.setdefault(name, []).append(cell)

    def value(name: str, index: int = 0) -> float | None:
        cells_of = named.get(name, [])
        if index >= len(cells_of) or cells_of[index] == "N/A":
            return None
        return _number(cells_of[index], number, file, name)

    size_col = next(c for c in _SIZE_COLUMNS if c in named)
    count_col = next((c for c in _COUNT_COLUMNS if c in named), None)
    size = value(size_col)
    count = value(count_col) if count_col else None
    if size is None or size <= 0 or size != int(size):
        raise LogError(file, number, f"column '{size_col}': expected a positive whole number of bytes")
    for index, cell in enumerate(named.get("#wrong", [])):
        if cell != "N/A" and _number(cell, number, file, "#wrong") > 0:
            side = "out-of-place" if index == 0 else "in-place"
            raise LogError(file, number, f"{side} result failed validation ({cell} wrong elements)")
    times = [value("time", 0), value("time", 1)]
    if all(t is None for t in times):
        raise LogError(file, number, "no time: both out-of-place and in-place are N/A")
    if any(t is not None and t <= 0 for t in times):
        raise LogError(file, number, "column 'time': must be > 0 us")
    out_s, in_s = (None if t is None else t * 1e-6 for t in times)
    redop = named.get("redop", named.get("op", ["none"]))[0]
    return Row(number, int(size), int(count or 0), named.get("type", ["?"])[0], redop, out_s, in_s,
               value("algbw"), value("busbw"))


def _test(table: _Table, file: str) -> Test:
    if not table.rows:
        raise LogError(file, table.line, "results table has no rows")
    run, rows = table.run, tuple(table.rows)
    collective = _named_collective(run, file)
    ranks = len(run.rank_hosts) or None
    collective = collective or _infer_collective(rows, ranks)
    ranks = ranks or _infer_ranks(collective, rows)
    hosts = set(run.rank_hosts.values())
    nodes = len(hosts) if hosts else (1 if ranks and run.threads_gpus == ranks else None)
    gpu = run.gpu_names[0] if len(set(run.gpu_names)) == 1 else None
    return Test(file, table.line, collective, ranks, nodes, gpu, rows, table.avg_busbw, run.nccl_version)


def _named_collective(run: _Run, file: str) -> Collective | None:
    if run.perf_name is None:
        return None
    name, line = run.perf_name
    if name not in PERF_NAMES:
        known = ", ".join(f"{n}_perf" for n in PERF_NAMES)
        raise LogError(file, line, f"unknown or unsupported collective '{name}_perf' (supported: {known})")
    return PERF_NAMES[name]


def _ratio_bounds(row: Row) -> tuple[float, float] | None:
    """busbw/algbw bounds given two-decimal printing, from the row with the widest algbw."""
    alg, bus = row.algbw_gbyte_s, row.busbw_gbyte_s
    if alg is None or bus is None or alg <= 10 * PRINT_ROUNDING_GBYTE_S:
        return None
    r = PRINT_ROUNDING_GBYTE_S
    return (bus - r) / (alg + r), (bus + r) / (alg - r)


def _best_row(rows: tuple[Row, ...]) -> Row:
    return max(rows, key=lambda row: row.algbw_gbyte_s or 0.0)


def _count_ratio(row: Row) -> float | None:
    element = ELEMENT_BYTES.get(row.dtype)
    return row.bytes / (row.count * element) if element and row.count else None


def _infer_collective(rows: tuple[Row, ...], ranks: int | None) -> Collective | None:
    row = _best_row(rows)
    bounds, per_count = _ratio_bounds(row), _count_ratio(row)
    if bounds is None or per_count is None:
        return None
    lo, hi = bounds
    if per_count == 1:
        if lo <= 1.0 <= hi:
            return "p2p"
        if lo > 1.0 and hi < 2.0 and (ranks is None or lo <= 2 * (ranks - 1) / ranks <= hi):
            return "all_reduce"
    elif per_count > 1 and row.redop == "sum":
        return "reduce_scatter"
    return None


def _infer_ranks(collective: Collective | None, rows: tuple[Row, ...]) -> int | None:
    row = _best_row(rows)
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        per_count = _count_ratio(row)
        return round(per_count) if per_count and per_count == round(per_count) and per_count >= 2 else None
    bounds = _ratio_bounds(row)
    if collective != "all_reduce" or bounds is None or bounds[1] >= 2.0:
        return None
    n_lo, n_hi = (2 / (2 - r) for r in bounds)  # factor 2(n-1)/n = r  <=>  n = 2/(2-r)
    candidates = range(max(2, math.ceil(n_lo)), math.floor(n_hi) + 1)
    return candidates[0] if len(candidates) == 1 else None
