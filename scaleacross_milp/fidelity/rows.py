"""Read a published-runs CSV (the shared data's published/training_throughput.csv) into typed rows (blank cells
are None). The package reads only the path it is given."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

TUNED_ROWS: tuple[tuple[str, int | None, str], ...] = (
    ("narayanan2021_t1", None, ""),
    ("torchtitan_h100_202412", 8, "eager"),
)
"""The split, per row as (source, GPUs or None for any, a word the notes contain), fixed before each fit: the
efficiency parameters in costmodel/compute.py were fitted on Megatron-LM 2021 Table 1 only; the sustained peak of
h100-96gb-500w (fidelity/hardware.py) on the 8-GPU eager torchtitan row only. Korthikanti 2022, Llama 3 and the
two 128-GPU torchtitan rows are held out."""


@dataclass(frozen=True)
class PublishedRow:
    """One published run with its configuration; `metric` says what `value` is."""

    source: str
    model: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    vocab: int
    seq_len: int
    gpu: str
    gpus: int
    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    vp: int | None
    micro_batch: int | None
    global_batch: int
    precision: str
    recompute: str
    dp_impl: str
    metric: str
    value: float
    notes: str

    @property
    def tuned(self) -> bool:
        """Whether the row was used to fit a parameter (TUNED_ROWS)."""
        return any(self.source == source and gpus in (None, self.gpus) and word in self.notes
                   for source, gpus, word in TUNED_ROWS)


_INTS = ("layers", "hidden", "ffn", "heads", "kv_heads", "vocab", "seq_len", "gpus", "tp", "pp", "dp", "cp", "ep",
         "global_batch")


def read_rows(path: Path) -> list[PublishedRow]:
    """Every row of the CSV, in file order."""
    with path.open(newline="") as handle:
        out = []
        for raw in csv.DictReader(handle):
            ints = {key: int(raw[key]) for key in _INTS}
            optional = {key: int(raw[key]) if raw[key] else None for key in ("vp", "micro_batch")}
            text = {key: raw[key] for key in ("source", "model", "gpu", "precision", "recompute", "dp_impl",
                                              "metric", "notes")}
            out.append(PublishedRow(**ints, **optional, **text, value=float(raw["value"])))
    return out
