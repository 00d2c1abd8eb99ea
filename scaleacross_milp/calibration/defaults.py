"""The bundled profiles: which of the 21 logs in data/nccl-tests/ build each one, and what we state about a log
where it is silent (each with its reason, quoted from the file's header). Rebuild them (from the repository root) with

    scaleacross-milp calibrate --rebuild-defaults ../shared/data/nccl-tests \\
        -o scaleacross_milp/calibration/profiles --force
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from scaleacross_milp.calibration.assemble import Given, build_profile, settle
from scaleacross_milp.calibration.nccl_tests import parse_log
from scaleacross_milp.calibration.profile import Profile, read_profile
from scaleacross_milp.spec.jsonfile import InputError

PROFILE_DIR = Path(__file__).with_name("profiles")
DEFAULT_PROFILE = "default"


@dataclass(frozen=True)
class Log:
    file: str
    given: Given = Given()
    why: str = ""


@dataclass(frozen=True)
class Bundle:
    description: str
    logs: tuple[Log, ...] = field(default_factory=tuple)


def _cluster01(kinds: tuple[str, ...] = ("all_gather", "all_reduce", "alltoall", "reduce_scatter", "sendrecv")):
    logs = [f"nccl_h100-sxm-cluster01-1node_{k}_8gpus.txt" for k in kinds]
    logs += [f"nccl_h100-sxm-cluster01-2nodes_{k}_16gpus.txt" for k in ("alltoall", "sendrecv")]
    logs += [f"nccl_h100-sxm-cluster01-10nodes_{k}_80gpus.txt" for k in kinds]
    return tuple(Log(f) for f in logs)


CLUSTER01 = ("H100 SXM cluster 'example-cluster01' (xxrjun/nccl-tests-cluster; NCCL 2.29.2, 400 Gb/s-class NIC per "
             "GPU inferred by the data's curators): all five collectives on 8 GPUs in one node and on 10 nodes "
             "(80 GPUs), all-to-all and sendrecv on 2 nodes; sizes 32 MiB-16 GiB")

BUNDLES: dict[str, Bundle] = {
    DEFAULT_PROFILE: Bundle("Default for H100 GPU types: the h100-sxm-cluster01 logs, the only H100 source measuring "
                            "all five collectives inside a node and across nodes. " + CLUSTER01, _cluster01()),
    "h100-sxm-cluster01": Bundle(CLUSTER01, _cluster01()),
    "h100-sxm-cluster00": Bundle(
        "H100 SXM cluster 'example-cluster00' (xxrjun/nccl-tests-cluster; NCCL 2.28.7): all-to-all and sendrecv on "
        "2 nodes (16 GPUs), 32 MiB-16 GiB; a much slower NIC per GPU than cluster01 (sendrecv 15.1 GB/s)",
        (Log("nccl_h100-sxm-cluster00-2nodes_alltoall_16gpus.txt"),
         Log("nccl_h100-sxm-cluster00-2nodes_sendrecv_16gpus.txt"))),
    "dgx-h100": Bundle(
        "DGX H100 (NVIDIA dgxc-benchmarking sample): all-reduce on 8 GPUs in one node, 8 B-16 GiB, busbw ~480 GB/s "
        "(NVLink SHARP likely)", (Log("nccl_dgx-h100_all_reduce_8gpus.txt"),)),
    "together-h100-ring": Bundle(
        "H100 HGX node (together-nccl-tests, NCCL 2.26.2) with NCCL_ALGO=Ring per the file name: all-reduce on 8 GPUs "
        "in one node, 8 B-8 GiB, busbw ~368 GB/s", (Log("nccl_together-h100-1node-ring_all_reduce_8gpus.txt"),)),
    "aws-p5-h100-efa": Bundle(
        "AWS p5.48xlarge (H100, EFAv2 3200 Gb/s per node; awsome-distributed-training): all-reduce on 2 nodes "
        "(16 GPUs) and on 8 GPUs of one node, 8 B-16 GiB",
        (Log("nccl_aws-p5-h100-efa_all_reduce_16gpus.txt", Given(nodes=2, gpu_model="H100"),
             "header: '2x AWS p5.48xlarge = 16x NVIDIA H100 80GB'"),
         Log("nccl_aws-p5-h100-batch-unknown-nodes_all_reduce_Ngpus.txt", Given(nodes=1, gpu_model="H100"),
             "header: 'AWS p5 (H100)', node count not stated; busbw 483 GB/s on 8 ranks exceeds what 400 Gb/s "
             "NICs could carry, so the 8 ranks share one NVLink domain"))),
    "aws-p4de-a100-efa": Bundle(
        "A100 80GB SXM: AWS p4de.24xlarge all-reduce on 2 nodes (16 GPUs, EFA 4x100 Gb/s per node), 8 B-2 GiB; "
        "NVLink sendrecv from another 8x A100 NVLink node (li-plus/playground), 128 MiB-1 GiB",
        (Log("nccl_aws-p4de-a100-efa_all_reduce_16gpus.txt", Given(nodes=2, gpu_model="A100"),
             "header: '2x AWS p4de.24xlarge = 16x NVIDIA A100 80GB'"),
         Log("nccl_a100-8gpu-nvlink_sendrecv_8gpus.txt", Given(ranks=8, nodes=1, gpu_model="A100"),
             "header: 'Tested on 8 A100 NVLink GPUs ... single node, 1 process x 8 GPUs (-g 8)'"))),
    "gcp-a3mega-h100-tcpxo": Bundle(
        "Google Cloud A3 Mega (H100, GPUDirect-TCPXO): all-reduce on 2 nodes (16 GPUs), 8 B-8 GiB",
        (Log("nccl_gcp-a3mega-h100-tcpxo_all_reduce_16gpus.txt"),)),
}


def build_bundle(name: str, log_dir: Path) -> Profile:
    """The bundled profile `name` built from the logs in `log_dir`."""
    bundle = BUNDLES[name]
    tables = [settle(test, log.given) for log in bundle.logs for test in parse_log(log_dir / log.file)]
    return build_profile(tables, name, bundle.description)


def bundled_names() -> list[str]:
    return sorted(BUNDLES)


@lru_cache(maxsize=32)
def _read(path: Path) -> Profile:
    return read_profile(path)


def load_profile(reference: str | None, base_dir: Path = Path()) -> Profile:
    """A bundled profile by name (None: the default), else a profile file (a relative path from `base_dir`)."""
    reference = reference or DEFAULT_PROFILE
    if reference in BUNDLES:
        return _read(PROFILE_DIR / f"{reference}.json")
    path = base_dir / reference
    if not path.is_file():
        raise InputError(f"collective_profile: '{reference}' is neither a bundled profile "
                         f"({', '.join(bundled_names())}) nor a file ({path} not found)")
    return _read(path.resolve())
