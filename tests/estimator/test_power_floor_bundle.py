"""estimator.power_floor_bundle: a bundle written before the floor gets one from its own GEMM training rows (the
devices its card names), sealed under its checksums and described in its card."""
from __future__ import annotations

import json

import pandas as pd
import pytest

import stepcast.estimator.data

from stepcast import estimator
from stepcast.estimator import power_floor as pf
from stepcast.estimator import power_floor_bundle as pfb
from stepcast.estimator.analytical import RooflineEstimator
from stepcast.estimator.router import FamilyRouter


def rows(hardware: str, tflops: float, n: int = 25) -> pd.DataFrame:
    frame = pd.DataFrame({"family": "gemm", "hardware": hardware, "dtype": "bf16", "m": 4096.0 + 64 * pd.RangeIndex(n),
                          "n": 4096.0, "k": 4096.0, "batch": 1.0, "source": "synthetic"})
    return frame.assign(runtime_us=2 * frame["m"] * frame["n"] * frame["k"] / (tflops * 1e12) * 1e6)


@pytest.fixture
def old_bundle(tmp_path):
    path = tmp_path / "bundle"
    FamilyRouter({"gemm": RooflineEstimator()}).save(path)
    (path / "card.json").write_text(json.dumps({"data": [{"family": "gemm", "source": "synthetic",
                                                          "hardware": "h100-sxm", "rows": 25}]}))
    (path / "card.md").write_text("# card\n")
    return path


def test_an_existing_bundle_gets_a_floor_from_the_devices_its_card_names(old_bundle, tmp_path, monkeypatch):
    monkeypatch.setattr(estimator.data, "load_measurements",
                        lambda **_: pd.concat([rows("h100-sxm", 800.0), rows("a100-sxm-80gb", 250.0)]))
    assert pfb.main(["--bundle", str(old_bundle), "--root", str(tmp_path / "no-shared-data")]) == 0
    floor = FamilyRouter.load(old_bundle).power_floor   # checked against the resealed SHA256SUMS
    assert floor.joules_per_flop == pytest.approx({"9.0x132/bf16": 700.0 / 800e12})   # the A100 was not trained on
    card = json.loads((old_bundle / "card.json").read_text())
    assert card["power_floor"]["boards"] == {"9.0x132/bf16": "h100-sxm"} and card["power_floor"]["binds_measured"][
        "raised"] == 0
    assert "## Power floor" in (old_bundle / "card.md").read_text()


def test_a_folder_that_is_no_bundle_is_refused_in_one_line(tmp_path, capsys):
    assert pfb.main(["--bundle", str(tmp_path)]) == 2
    expected = f"stepcast: {tmp_path}: not an estimator bundle (expected manifest.json inside)"
    assert capsys.readouterr().err.strip() == expected
    assert not (tmp_path / pf.FILENAME).exists()
