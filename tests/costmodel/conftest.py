import pytest

from scaleacross_milp.spec.instance import Instance
from scaleacross_milp.spec.model import ModelSpec

LLAMA3_8B = dict(
    name="llama3-8b", layers=32, hidden=4096, ffn_hidden=14336, heads=32, kv_heads=8, vocab=128256
)
H100 = dict(peak_dense_tflops={"bf16": 989}, hbm_gib=80, hbm_tbyte_s=3.35, nvlink_gbyte_s=370, nic_gbit_s=400)


GPT175 = dict(
    name="gpt3-175b", layers=96, hidden=12288, ffn_hidden=49152, heads=96, kv_heads=96, vocab=51200, gated_ffn=False
)
"""GPT-3 175B as configured in the Megatron-LM papers (vocabulary padded to 51,200, 4h GeLU MLP)."""


@pytest.fixture
def gpt175b() -> ModelSpec:
    return ModelSpec.model_validate(GPT175)


@pytest.fixture
def llama8b() -> ModelSpec:
    return ModelSpec.model_validate(LLAMA3_8B)


def make_instance(recompute: str = "selective", model: dict | None = None) -> Instance:
    return Instance.model_validate(
        dict(
            name="t",
            model=model or LLAMA3_8B,
            training=dict(seq_len=8192, global_batch_sequences=256, recompute=recompute),
            gpu_types={"h100": H100},
            topology=dict(
                buildings=[dict(name="b", gpus=1024, gpu_type="h100", pod_gpus=512, oversubscription=4)]
            ),
        )
    )


@pytest.fixture
def instance_factory():
    return make_instance
