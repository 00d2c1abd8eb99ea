"""The bundled profiles: rebuilt from the logs they reproduce the shipped files; instances select them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scaleacross_milp.calibration.defaults import PROFILE_DIR, build_bundle, bundled_names, load_profile
from scaleacross_milp.calibration.model import ProfileCollectiveModel
from scaleacross_milp.costmodel.build import collective_model
from scaleacross_milp.costmodel.comm import AlphaBetaModel
from scaleacross_milp.loader import load_instance
from scaleacross_milp.spec.jsonfile import InputError

ROOT = Path(__file__).resolve().parents[2]
CAMPUS = ROOT / "instances" / "campus-2b-llama3-70b.json"


@pytest.mark.parametrize("name", bundled_names())
def test_rebuilding_reproduces_the_shipped_profile(logs, name):
    assert build_bundle(name, logs).to_json() == (PROFILE_DIR / f"{name}.json").read_text()


def test_every_log_is_used_and_every_profile_is_shipped(logs):
    sources = {s.split(":")[0] for n in bundled_names() for c in load_profile(n).curves for s in c.sources}
    assert sources == {p.name for p in logs.glob("*.txt")}
    assert sorted(p.stem for p in PROFILE_DIR.glob("*.json")) == bundled_names()


def _instance(tmp_path: Path, **extra) -> Path:
    data = json.loads(CAMPUS.read_text())
    data["model"] = {"file": str(ROOT / "models" / "llama3-70b.json")}
    data.update(extra)
    path = tmp_path / "instance.json"
    path.write_text(json.dumps(data))
    return path


def test_instance_selects_default_bundled_or_file_profile(tmp_path):
    default = load_instance(_instance(tmp_path))
    assert default.collective_profile is None
    assert isinstance(collective_model(default, "h100-sxm", default.gpu_types["h100-sxm"]), ProfileCollectiveModel)
    named = load_instance(_instance(tmp_path, collective_profile="dgx-h100"))
    assert collective_model(named, "h100-sxm", named.gpu_types["h100-sxm"]).profile.name == "dgx-h100"
    (tmp_path / "mine.json").write_text((PROFILE_DIR / "together-h100-ring.json").read_text())
    by_path = load_instance(_instance(tmp_path, collective_profile="mine.json"))
    assert Path(by_path.collective_profile) == (tmp_path / "mine.json").resolve()
    assert collective_model(by_path, "h100-sxm", by_path.gpu_types["h100-sxm"]).profile.name == "together-h100-ring"


def test_other_gpu_types_keep_the_datasheet_model(tmp_path):
    inst = load_instance(_instance(tmp_path))
    gpu = inst.gpu_types["h100-sxm"]
    assert isinstance(collective_model(inst, "b200", gpu), AlphaBetaModel)  # "h100" is not a token of "b200"
    a100 = load_instance(_instance(tmp_path, collective_profile="aws-p4de-a100-efa"))
    assert isinstance(collective_model(a100, "h100-sxm", gpu), AlphaBetaModel)


def test_unknown_or_broken_profile_names_the_instance_and_field(tmp_path):
    with pytest.raises(InputError, match=r"instance.json: collective_profile: 'nope' is neither a bundled"):
        load_instance(_instance(tmp_path, collective_profile="nope"))
    (tmp_path / "broken.json").write_text(json.dumps({"name": "b", "gpu_model": "H100", "curves": []}))
    with pytest.raises(InputError, match=r"broken.json: curves: List should have at least 1 item"):
        load_instance(_instance(tmp_path, collective_profile="broken.json"))
