"""Damaged or hostile estimator bundles end ``stepcast predict`` with one line and exit 2, within seconds,
before XGBoost reads a byte (five changed bytes in a UBJ model used to segfault the predictor, exit 139)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stepcast import estimator
from stepcast.estimator.bundle import seal_bundle
from stepcast.estimator.bundle_checksums import main as bundle_checksums
from stepcast.estimator.checksums import CHECKSUMS_FILE, BundleIntegrityError, folder_files, sha256_of
from stepcast.profiling.paths import MODELS_DIR, REPO_ROOT

KERNELS = "family,hardware,dtype,m,n,k,batch\ngemm,h100-sxm,bf16,4096,4096,4096,1\n"


def predict(bundle: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess, float]:
    kernels = tmp_path / "kernels.csv"
    kernels.write_text(KERNELS)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "stepcast.estimator.predict", "--input", str(kernels), "--output",
                           str(tmp_path / "out.csv"), "--model", str(bundle)], capture_output=True, text=True,
                          cwd=REPO_ROOT, env={**os.environ, "PYTHONWARNINGS": "ignore"}, timeout=120)
    return proc, time.monotonic() - started


def assert_one_line_failure(proc: subprocess.CompletedProcess, seconds: float, *fragments: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("stepcast: "), proc.stderr[-2000:]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert seconds < 10, f"took {seconds:.1f} s"


@pytest.fixture
def shipped(tmp_path) -> Path:
    """A copy of the shipped default bundle, to damage."""
    return Path(shutil.copytree(MODELS_DIR / "xgboost", tmp_path / "xgboost"))


def test_shipped_bundles_verify_and_load():
    for name in ("xgboost", "mlp"):
        assert (MODELS_DIR / name / CHECKSUMS_FILE).is_file()
        model = estimator.load(name)
        assert model.predict([dict(family="gemm", hardware="h100-sxm", dtype="bf16", m=64, n=64, k=64,
                                   batch=1)])[0] > 0


@pytest.mark.parametrize("changed", [1, 5])
def test_changed_bytes_in_a_model_file(shipped, tmp_path, changed):
    model = shipped / "gemm" / "model.ubj"
    data = bytearray(model.read_bytes())
    for i in range(changed):
        data[1000 + 7 * i] ^= 0x5A
    model.write_bytes(bytes(data))
    proc, seconds = predict(shipped, tmp_path)
    assert_one_line_failure(proc, seconds, str(model), "sha256")
    assert not (tmp_path / "out.csv").exists()


def test_truncated_model_file(shipped, tmp_path):
    model = shipped / "gemm" / "model.ubj"
    model.write_bytes(model.read_bytes()[:5000])
    proc, seconds = predict(shipped, tmp_path)
    assert_one_line_failure(proc, seconds, str(model), "sha256")


def test_changed_manifest(shipped, tmp_path):
    manifest = shipped / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"unsupported_spec"', '"never"'))
    proc, seconds = predict(shipped, tmp_path)
    assert_one_line_failure(proc, seconds, str(manifest), "sha256")


def _rewrite_manifest(bundle: Path, **changes) -> None:
    """Change the manifest and re-list its checksum, as a hostile bundle would (the checksums then match)."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest.update(changes)
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    sums = [line for line in (bundle / CHECKSUMS_FILE).read_text().splitlines() if not line.endswith("  manifest.json")]
    sums.append(f"{sha256_of(bundle / 'manifest.json')}  manifest.json")
    (bundle / CHECKSUMS_FILE).write_text("\n".join(sums) + "\n")


@pytest.mark.parametrize("escape", ["relative", "absolute"])
def test_manifest_path_escaping_the_bundle(shipped, tmp_path, escape):
    outside = shutil.copytree(shipped / "gemm", tmp_path / "outside" / "gemm")  # a loadable model out there
    target = str(outside) if escape == "absolute" else "../outside/gemm"
    _rewrite_manifest(shipped, families={**json.loads((shipped / "manifest.json").read_text())["families"],
                                         "gemm": target})
    proc, seconds = predict(shipped, tmp_path)
    assert_one_line_failure(proc, seconds, str(shipped / "manifest.json"), repr(target))


def test_manifest_without_families(shipped, tmp_path):
    manifest = json.loads((shipped / "manifest.json").read_text())
    del manifest["families"]
    (shipped / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=r"manifest.json: field 'families'"):  # nor can the exporter seal it
        seal_bundle(shipped)
    _rewrite_manifest(shipped)
    proc, seconds = predict(shipped, tmp_path)
    assert_one_line_failure(proc, seconds, "manifest.json: field 'families': expected an object")


def test_bundle_without_checksums_is_refused_and_the_command_adds_them(shipped, tmp_path):
    (shipped / CHECKSUMS_FILE).unlink()
    proc, seconds = predict(shipped, tmp_path)
    assert_one_line_failure(proc, seconds, f"{shipped / CHECKSUMS_FILE}: missing",
                            "python -m stepcast.estimator.bundle_checksums")
    weights = {p: p.read_bytes() for p in shipped.rglob("model.ubj")}
    assert bundle_checksums([str(shipped)]) == 0
    assert all(p.read_bytes() == data for p, data in weights.items())  # the weights are not touched
    assert (shipped / CHECKSUMS_FILE).read_bytes() == (MODELS_DIR / "xgboost" / CHECKSUMS_FILE).read_bytes()


def test_file_added_to_a_model_folder_is_refused(shipped):
    (shipped / "gemm" / "extra.json").write_text("{}")
    with pytest.raises(BundleIntegrityError, match=r"gemm/extra.json: not listed in .*SHA256SUMS"):
        estimator.load(str(shipped))


def test_corrupt_single_estimator_folder(shipped):
    (shipped / "norm" / "model.ubj").write_bytes(b"{L\x00")
    with pytest.raises(BundleIntegrityError, match=r"norm/model.ubj: sha256 does not match"):
        estimator.load(str(shipped / "norm"))


def test_exporter_and_command_write_the_same_checksums(tmp_path, gemm_bundle):
    sums = {p: p.read_bytes() for p in gemm_bundle.rglob(CHECKSUMS_FILE)}
    assert {p.relative_to(gemm_bundle).as_posix() for p in sums} == {CHECKSUMS_FILE, f"gemm/{CHECKSUMS_FILE}",
                                                                     f"_fallback/{CHECKSUMS_FILE}"}
    for path in sums:
        path.unlink()
    seal_bundle(gemm_bundle)
    assert {p: p.read_bytes() for p in gemm_bundle.rglob(CHECKSUMS_FILE)} == sums
    listed = [line.split("  ", 1)[1] for line in (gemm_bundle / CHECKSUMS_FILE).read_text().splitlines()]
    assert "manifest.json" in listed and "gemm/model.ubj" in listed and "gemm/meta.json" in listed
    assert listed == sorted(listed)
    assert len(listed) == 1 + len(folder_files(gemm_bundle / "gemm")) + len(folder_files(gemm_bundle / "_fallback"))


@pytest.fixture
def gemm_bundle(tmp_path) -> Path:
    """A bundle as the exporter writes it (FamilyRouter.save), with a small gemm model."""
    import numpy as np
    import pandas as pd

    from stepcast.estimator.router import FamilyRouter
    from stepcast.estimator.xgb import XGBoostEstimator

    rng = np.random.default_rng(0)
    rows = pd.DataFrame({"family": "gemm", "hardware": "h100-sxm", "dtype": "bf16",
                         "m": rng.integers(16, 4096, 64).astype(float), "n": 512.0, "k": 512.0, "batch": 1.0})
    model = XGBoostEstimator(n_estimators=4).fit(rows, rows["m"].to_numpy() * 0.01 + 5.0)
    return FamilyRouter({"gemm": model}, version="test").save(tmp_path / "bundle")
