"""Published rows built by hand (no CSV needed) and the shared CSV (../shared/data from the repository root)."""

from __future__ import annotations

import pytest

from scaleacross_milp.fidelity.rows import PublishedRow, read_rows

MEGATRON_76B = PublishedRow(
    source="narayanan2021_t1", model="gpt-76b", layers=60, hidden=10240, ffn=40960, heads=80, kv_heads=80,
    vocab=51200, seq_len=2048, gpu="a100-80gb", gpus=1024, tp=8, pp=4, dp=32, cp=1, ep=1, vp=3, micro_batch=2,
    global_batch=1792, precision="fp16", recompute="full", dp_impl="local-ddp", metric="hw_tflops_per_gpu",
    value=140.0, notes="interleaved 1F1B, 5 layers per virtual stage",
)
LLAMA3_LONG = PublishedRow(
    source="llama3_2024_t4", model="llama3-405b", layers=126, hidden=16384, ffn=53248, heads=128, kv_heads=8,
    vocab=128256, seq_len=131072, gpu="h100-80gb", gpus=16384, tp=8, pp=16, dp=8, cp=16, ep=1, vp=None,
    micro_batch=None, global_batch=128, precision="bf16", recompute="none", dp_impl="fsdp-no-reshard",
    metric="model_tflops_per_gpu", value=380.0, notes="long context, CP 16; BF16 MFU 38%",
)


@pytest.fixture
def megatron_76b() -> PublishedRow:
    return MEGATRON_76B


@pytest.fixture
def llama3_long() -> PublishedRow:
    return LLAMA3_LONG


@pytest.fixture
def published(shared_data) -> list[PublishedRow]:
    return read_rows(shared_data("published/training_throughput.csv"))
