"""One published row -> the single-building Instance and fixed Layout it describes.

What the rows leave open, and what is assumed (the same for every row of a source, never per row):
  model        GPT rows: 4h GeLU MLP (ffn column), MHA, untied head, vocabulary 51,200 as published; Llama rows:
               SwiGLU (gated) with GQA (kv_heads column). Nemotron-4 (squared-ReLU MLP) is ungated like GPT; Grok-1
               and Qwen3 are gated. head_dim, experts, top_k and expert_ffn columns (benchmarks/published/) give the
               head width when a*d != h (Qwen3) and the MoE block (every layer MoE, no shared expert; the rows
               say routing was force-balanced, as the cost model assumes). Names are the row's.
  schedule     pp = 1: no pipeline (1F1B degenerates to gradient accumulation); vp > 1: interleaved 1F1B with
               vp chunks; vp = 1: 1F1B. Llama 3 (vp blank, "interleaved PP with custom schedule"): interleaved
               with 2 chunks per rank: a layout gives each rank layers that split into equal chunks, and 126
               layers over 16 ranks only split into 2 (8 layers on ranks 0-14, 6 on rank 15, which also holds
               the LM head; Meta took one layer off the first and the last stage for that balance).
               Where the layers do not split into vp chunks per rank (Llama 3.1 405B's 126 layers with PP 8 VP 8:
               Megatron counts the embedding and the loss as two more layer slots, 128 = 8 x 8 x 2), the chunks are
               the divisor v <= vp of the layers whose busiest rank holds the fewest layers, the larger on ties
               (126, PP 8, VP 8 -> v = 2: 16 layers on ranks 0-6, 14 on rank 7; the pipeline bubble is then priced
               at (p-1)/(2m) where the run had (p-1)/(8m)).
  micro-batch  blank (Llama 3): 1 sequence; microbatches = global_batch / (dp x micro_batch).
  DP mode      torch-ddp, local-ddp, none (dp = 1) -> DDP; fsdp -> FSDP (reshard after forward, torchtitan's
               default); fsdp-no-reshard as named. NVIDIA's NeMo / Megatron-Bridge rows run Megatron's distributed
               optimizer (dist-opt: gradients reduce-scattered, parameters all-gathered, optimizer states sharded)
               -> DPMode.zero1; megatron-fsdp -> FSDP.
  recompute    full / selective / none as named; "selective+sequence-parallel" is selective with sequence
               parallelism. torchtitan's "selective" is op-level (llama3_8b.toml: selective_ac_option = 'op'):
               per layer it saves the SDPA output and the mm outputs except every second mm (wk, wo, w3), and
               recomputes those three mms and every other op in backward. It is priced as Recompute.selective
               (Korthikanti: recompute the attention core). Per token per layer, Llama 3 8B at s = 8192: op-level
               recomputes 2(hgd + adh + hf) = 159.4 MFLOP of GEMMs (at eff(4096) = 0.66 on the 500 W H100: the
               time of 243.1 MFLOP at peak) and the forward's elementwise bytes (610 kB eager, 188 kB compiled);
               selective charges the flash core's forward 4sad/2 = 67.1 MFLOP at Hopper's flash efficiency 0.44
               (the time of 152.5 MFLOP at peak) and no bytes. On the 8-GPU row (16,384 tokens per GPU, 32 layers,
               645 TFLOP/s, 1.92 TB/s usable HBM) that leaves out 74 ms of GEMM and 167 ms of eager bytes (2.6 %
               and 5.9 % of its 2.84 s), on the compiled row 74 ms and 51 ms (2.9 % and 2.0 % of 2.52 s). The
               fitted 500 W peak absorbs them (fidelity.hardware); no recompute mode is added to the contract.
  sequence     on for Korthikanti's selective+SP rows and Llama 3 (TP with sequence parallelism, as Megatron-LM
  parallel     since 2022); off for Megatron-LM 2021 (it predates it) and Korthikanti's full-recompute rows
               ("TP all-reduce"); irrelevant at tp = 1.
  attention    Megatron-LM 2021 / 2022 materialise the s x s scores; Llama 3 (2024), torchtitan (PyTorch SDPA)
               and NVIDIA's NeMo / Megatron-Bridge rows (Transformer Engine's cuDNN fused attention) use flash
               kernels. NVIDIA's rows use sequence parallelism with TP (NeMo's default) and no recompute (the
               published performance recipes; their READMEs name a recompute module only for DeepSeek-V3).
  overlap      NVIDIA's rows run Megatron-Bridge / NeMo recipes, whose DistributedDataParallelConfig sets
               overlap_grad_reduce=True, overlap_param_gather=True, use_distributed_optimizer=True (NeMo's
               "Communication Overlap" guide: the DP reduce-scatter and all-gather chunked per layer behind compute,
               exposing one chunk): Training.overlap_grad_reduce and overlap_param_gather on for every NVIDIA
               row; Training.tp_comm_overlap where the row's notes say "TP comm overlap" (the READMEs' tables; every
               such row has TP > 1). torch-ddp rows:
               overlap_grad_reduce on (PyTorch DDP all-reduces its buckets in autograd hooks during the backward,
               always). local-ddp and none (Megatron-LM 2021 / 2022's own DDP, no overlap option then): off; the FSDP
               modes always overlap their reduction (costmodel.dp.grad_reduce_overlaps).
  kernels      torchtitan rows run eager (Training.kernels = eager) unless the notes say torch.compile (fused);
               Megatron-LM (fused kernels), Llama 3 and NVIDIA rows (Transformer Engine) are fused.
  fabric       fidelity.hardware (one building of exactly the row's GPUs).
"""

from __future__ import annotations

from scaleacross_milp.fidelity.hardware import GPU_TYPES, building
from scaleacross_milp.fidelity.rows import PublishedRow
from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.model import ModelSpec, MoE
from scaleacross_milp.spec.plan import Layout, Shape
from scaleacross_milp.spec.search import DPMode, Schedule
from scaleacross_milp.spec.topology import Topology
from scaleacross_milp.spec.training import AttentionKernel, Kernels, Recompute, Training

LLAMA3_INTERLEAVE = 2
DEFAULT_MICRO_BATCH = 1
TORCH_DDP = "torch-ddp"
DP_MODES = {TORCH_DDP: DPMode.ddp, "local-ddp": DPMode.ddp, "none": DPMode.ddp, "fsdp": DPMode.fsdp,
            "fsdp-no-reshard": DPMode.fsdp_no_reshard, "dist-opt": DPMode.zero1, "megatron-fsdp": DPMode.fsdp}
NVIDIA_SOURCES = ("dgxc", "nemo", "mbridge")
FLASH_SOURCES = ("llama3", "torchtitan", *NVIDIA_SOURCES)
SEQUENCE_PARALLEL_SOURCES = ("llama3", *NVIDIA_SOURCES)
UNGATED_MODELS = ("gpt", "nemotron4")
EAGER_SOURCES = ("torchtitan",)
COMPILED_NOTE = "torch.compile"
TP_OVERLAP_NOTE = "TP comm overlap"


def model_spec(row: PublishedRow) -> ModelSpec:
    moe = None
    if row.experts:
        moe = MoE(experts=row.experts, top_k=row.top_k, expert_ffn_hidden=row.expert_ffn)
    return ModelSpec(name=row.model, layers=row.layers, hidden=row.hidden, ffn_hidden=row.ffn, heads=row.heads,
                     kv_heads=row.kv_heads, vocab=row.vocab, head_dim=row.head_dim,
                     gated_ffn=not row.model.startswith(UNGATED_MODELS), moe=moe)


def training(row: PublishedRow) -> Training:
    recompute, _, extra = row.recompute.partition("+")
    return Training(
        seq_len=row.seq_len, global_batch_sequences=row.global_batch, precision=row.precision,
        recompute=Recompute(recompute),
        sequence_parallel=extra == "sequence-parallel" or row.source.startswith(SEQUENCE_PARALLEL_SOURCES),
        attention=AttentionKernel.flash if row.source.startswith(FLASH_SOURCES) else AttentionKernel.materialized,
        kernels=kernels(row),
        tp_comm_overlap=TP_OVERLAP_NOTE in row.notes,
        overlap_grad_reduce=row.source.startswith(NVIDIA_SOURCES) or row.dp_impl == TORCH_DDP,
        overlap_param_gather=row.source.startswith(NVIDIA_SOURCES),
    )


def kernels(row: PublishedRow) -> Kernels:
    """Eager for torchtitan rows unless their notes name torch.compile; fused otherwise."""
    eager = row.source.startswith(EAGER_SOURCES) and COMPILED_NOTE not in row.notes
    return Kernels.eager if eager else Kernels.fused


def to_instance(row: PublishedRow) -> Instance:
    """The row's model, batch and GPUs in one building (collective profile: the bundled default, which
    prices H100 collectives from measurements and A100 ones from the datasheet model)."""
    return Instance(
        name=f"{row.source}-{row.model}-{row.gpus}", model=model_spec(row), training=training(row),
        gpu_types={row.gpu: GPU_TYPES[row.gpu]},
        topology=Topology(buildings=[building(row.source, row.gpus, row.gpu)]),
    )


def chunks(layers: int, pp: int, vp: int) -> int:
    """vp if the layers split into vp chunks per rank; else the divisor v <= vp of `layers` minimising the busiest
    rank's layers v * ceil(layers / v / pp), the larger v on ties."""
    return min((v for v in range(1, vp + 1) if layers % v == 0), key=lambda v: (v * -(-layers // v // pp), -v))


def to_layout(row: PublishedRow) -> Layout:
    """The row's shape, schedule and DP mode, without placement (the verifier runs it in the one building)."""
    micro_batch = row.micro_batch or DEFAULT_MICRO_BATCH
    vp = chunks(row.layers, row.pp, row.vp if row.vp is not None else LLAMA3_INTERLEAVE)
    shape = Shape(tp=row.tp, cp=row.cp, ep=row.ep, pp=row.pp, dp=row.dp, micro_batch=micro_batch,
                  microbatches=row.global_batch // (row.dp * micro_batch))
    schedule = Schedule.interleaved if vp > 1 and row.pp > 1 else Schedule.one_f_one_b
    return Layout(shape=shape, schedule=schedule, interleave=vp if schedule is Schedule.interleaved else 1,
                  dp_mode=DP_MODES[row.dp_impl])
