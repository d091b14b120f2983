"""Kernel labels of GEMM rows: recorded launches are kept, the rest come from cuBLASLt's heuristic on the virtual
device, cached by shape, dtype and device with the cuBLAS version; GPUs the wheel's cuBLAS cannot run stay
unlabelled."""
from __future__ import annotations

import pandas as pd
import pytest

from stepcast.estimator.kernel_labels import cache_file, can_label, label_gemms, read_cache


def gemms(**columns) -> pd.DataFrame:
    base = {"family": "gemm", "hardware": "h100-sxm", "dtype": "bf16", "m": 4096.0, "n": 4096.0, "k": 4096.0,
            "batch": 1.0}
    return pd.DataFrame([base | columns])


def test_only_gpus_the_wheels_cublas_supports_can_be_labelled():
    assert can_label("h100-sxm") and can_label("a100-sxm-80gb") and can_label("t4")
    assert not can_label("p100") and not can_label("v100-pcie-32gb") and not can_label("cpu-intel-xeon-2c")
    assert not can_label("no-such-gpu")


def test_a_recorded_launch_is_kept_and_marked_recorded(tmp_path):
    frame = gemms(kernel_name="volta_sgemm_128x64_nn", grid="4,2,1", hardware="v100-pcie-32gb", dtype="fp32")
    out = label_gemms(frame, ask=True, cache_dir=tmp_path)
    assert out.loc[0, "kernel_name"] == "volta_sgemm_128x64_nn" and out.loc[0, "kernel_label"] == "recorded"
    assert not list(tmp_path.iterdir())  # nothing asked


def test_rows_the_heuristic_cannot_answer_stay_unlabelled(tmp_path):
    frame = pd.concat([gemms(hardware="p100", dtype="fp32"), gemms(batch=8.0), gemms(dtype="tf32")],
                      ignore_index=True)
    out = label_gemms(frame, ask=True, cache_dir=tmp_path)
    assert out["kernel_name"].isna().all() and out["kernel_label"].isna().all()


def test_without_asking_only_the_cache_answers(tmp_path):
    path = cache_file("h100-sxm", tmp_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"m": [4096], "n": [4096], "k": [4096], "dtype": ["bf16"], "kernel_name": ["nvjet_x"],
                  "grid": ["8,16,1"], "kernel_label": ["cublaslt-1"]}).to_parquet(path)
    out = label_gemms(pd.concat([gemms(), gemms(m=100.0)], ignore_index=True), ask=False, cache_dir=tmp_path)
    assert out["kernel_name"].tolist()[0] == "nvjet_x" and pd.isna(out["kernel_name"].tolist()[1])


@pytest.mark.slow
def test_asking_labels_with_the_heuristics_kernel_and_caches_it_with_the_version(tmp_path):
    frame = pd.concat([gemms(), gemms(m=7.0, n=4096.0, k=4096.0)], ignore_index=True)
    out = label_gemms(frame, ask=True, cache_dir=tmp_path)
    assert out["kernel_name"].str.startswith("nvjet_sm90").all()  # Hopper's cuBLAS 13 path
    assert out["kernel_label"].str.match(r"cublaslt-13\d{4}$").all()
    assert all(len(g.split(",")) == 3 for g in out["grid"])
    cached = read_cache("h100-sxm", tmp_path)
    assert len(cached) == 2 and "cublas" in cache_file("h100-sxm", tmp_path).name


def test_drift_compares_recorded_kernels_with_the_heuristics_path_and_tile(tmp_path):
    from stepcast.estimator.kernel_labels import version_drift

    path = cache_file("t4", tmp_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"m": [64, 128], "n": [4096, 4096], "k": [4096, 4096], "dtype": ["fp32", "fp32"],
                  "kernel_name": ["volta_sgemm_128x64_tn", "volta_sgemm_64x64_tn"], "grid": ["1,1,1", "1,1,1"],
                  "kernel_label": ["cublaslt-1", "cublaslt-1"]}).to_parquet(path)
    frame = pd.concat([gemms(hardware="t4", dtype="fp32", m=64.0), gemms(hardware="t4", dtype="fp32", m=128.0)],
                      ignore_index=True).assign(kernel_name=["volta_sgemm_128x64_tn", "turing_sgemm_128x64_tn"],
                                                source="neusight")
    got = version_drift(frame, ask=False, cache_dir=tmp_path).iloc[0]
    assert got["rows"] == 2 and got["same_path"] == 1.0 and got["same_path_and_tile"] == 0.5


def write_cache(tmp_path, hardware: str, cublas: str | None, kernel: str) -> None:
    path = cache_file(hardware, tmp_path, cublas)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"m": [4096], "n": [4096], "k": [4096], "dtype": ["bf16"], "kernel_name": [kernel],
                  "grid": ["8,16,1"], "kernel_label": [f"cublaslt-{kernel}"]}).to_parquet(path)


def test_label_caches_are_kept_per_device_and_cublas_version(tmp_path):
    from stepcast.estimator.kernel_labels import cublas_wheel_version

    assert cache_file("h100-sxm", tmp_path, "12.1.3.1") != cache_file("h100-sxm", tmp_path)
    assert cache_file("h100-sxm", tmp_path).name.startswith(f"h100-sxm-cublas{cublas_wheel_version()}-device")
    assert "12.1.3.1" in cache_file("h100-sxm", tmp_path, "12.1.3.1").name


def test_label_caches_are_kept_per_emulated_device_answers(tmp_path, monkeypatch):
    """A driver rebuilt with other answers (or a device with other attributes) must not reuse older labels."""
    import stepcast.emulate.driver.build as build
    from stepcast.estimator.kernel_labels import device_key

    before = cache_file("h100-sxm", tmp_path)
    assert cache_file("h200-sxm", tmp_path) != before
    device_key.cache_clear()
    monkeypatch.setattr(build, "driver_key", lambda: "another driver")
    try:
        assert cache_file("h100-sxm", tmp_path) != before
    finally:
        device_key.cache_clear()


def test_every_source_version_names_a_wheel_that_can_be_fetched():
    from stepcast.estimator.kernel_labels import CUBLAS_WHEELS, SOURCE_CUBLAS

    assert SOURCE_CUBLAS["vidur"].startswith("12.")
    assert all(v.split(".")[0] in CUBLAS_WHEELS for v in SOURCE_CUBLAS.values())


def test_a_sources_rows_take_the_labels_of_the_cublas_it_ran(tmp_path, monkeypatch):
    from stepcast.estimator import kernel_labels

    monkeypatch.setitem(kernel_labels.SOURCE_CUBLAS, "old_source", "12.1.3.1")
    write_cache(tmp_path, "h100-sxm", "12.1.3.1", "sm90_xmma_old")
    write_cache(tmp_path, "h100-sxm", None, "nvjet_new")
    frame = pd.concat([gemms(source="old_source"), gemms(source="other"), gemms()], ignore_index=True)
    out = label_gemms(frame, cache_dir=tmp_path)
    assert out["kernel_name"].tolist() == ["sm90_xmma_old", "nvjet_new", "nvjet_new"]


def test_a_source_whose_cublas_is_not_here_falls_back_to_the_wheels_labels(tmp_path, monkeypatch, caplog):
    from stepcast.estimator import kernel_labels

    monkeypatch.setenv("STEPCAST_CACHE_DIR", str(tmp_path / "empty"))
    monkeypatch.setitem(kernel_labels.SOURCE_CUBLAS, "old_source", "12.0.0.0")
    write_cache(tmp_path, "h100-sxm", None, "nvjet_new")
    out = label_gemms(gemms(source="old_source"), ask=True, cache_dir=tmp_path)
    assert out["kernel_name"].tolist() == ["nvjet_new"]
    assert "--fetch-cublas 12.0.0.0" in caplog.text


def old_cublas_fails(tmp_path, monkeypatch) -> list:
    """Make ``kernel_labels.query`` fail for any source cuBLAS and cache the wheel's label; returns the versions
    asked, in order (None: the wheel's)."""
    from stepcast.estimator import kernel_labels

    asked = []

    def query(shapes, device, cache_dir, cublas=None):
        asked.append(cublas)
        if cublas is not None:
            raise RuntimeError("cublasLtCreate returned 14")
        write_cache(tmp_path, device, None, "nvjet_new")

    monkeypatch.setattr(kernel_labels, "query", query)
    monkeypatch.setattr(kernel_labels, "_FAILED", set())  # no failure remembered from another test
    return asked


def test_a_source_cublas_that_failed_on_a_device_is_not_asked_again_in_the_process(tmp_path, monkeypatch):
    from stepcast.estimator import kernel_labels

    asked = old_cublas_fails(tmp_path, monkeypatch)
    monkeypatch.setitem(kernel_labels.SOURCE_CUBLAS, "old_source", "12.1.3.1")
    monkeypatch.setattr(kernel_labels, "_available", lambda version, cache_dir, hardware: version)
    for _ in range(3):
        out = label_gemms(gemms(source="old_source"), ask=True, cache_dir=tmp_path)
        assert out["kernel_name"].tolist() == ["nvjet_new"]
    assert asked == ["12.1.3.1", None, None, None]


def test_a_missing_cublas_names_the_command_that_fetches_it(tmp_path, monkeypatch):
    from stepcast.estimator.kernel_labels import CublasMissingError, cublaslt_library

    monkeypatch.setenv("STEPCAST_CACHE_DIR", str(tmp_path))
    assert cublaslt_library(None) is None  # the wheel's: gemm_choice finds it itself
    with pytest.raises(CublasMissingError,
                       match=r"python -m stepcast.estimator.kernel_labels --fetch-cublas 12.1.3.1$"):
        cublaslt_library("12.1.3.1")
    with pytest.raises(CublasMissingError, match="no wheel known for major version 9"):
        cublaslt_library("9.0")


def test_fetching_unpacks_only_libcublaslt_from_the_wheel(tmp_path, monkeypatch):
    import zipfile

    from stepcast.estimator.kernel_labels import cublaslt_library, fetch_cublas

    monkeypatch.setenv("STEPCAST_CACHE_DIR", str(tmp_path / "cache"))
    wheel = tmp_path / "nvidia_cublas_cu12-12.1.3.1-py3-none-manylinux1_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("nvidia/cublas/lib/libcublasLt.so.12", b"\x7fELF lt")
        archive.writestr("nvidia/cublas/lib/libcublas.so.12", b"\x7fELF blas")
    out = fetch_cublas("12.1.3.1", wheel)
    assert out == cublaslt_library("12.1.3.1") and out.read_bytes() == b"\x7fELF lt"
    assert [p.name for p in out.parent.iterdir()] == ["libcublasLt.so.12"]
    with pytest.raises(ValueError, match="--fetch-cublas 9.0"):
        fetch_cublas("9.0", wheel)


def test_a_source_whose_cublas_has_no_labels_of_the_device_falls_back_to_the_wheels(tmp_path, monkeypatch):
    from stepcast.estimator import kernel_labels

    monkeypatch.setitem(kernel_labels.SOURCE_CUBLAS, "old_source", "12.0.0.1")
    monkeypatch.setattr(kernel_labels, "cublaslt_library", lambda version: tmp_path / "libcublasLt.so.12")
    write_cache(tmp_path, "h100-sxm", None, "nvjet_new")
    out = label_gemms(gemms(source="old_source"), ask=False, cache_dir=tmp_path)
    assert out["kernel_name"].tolist() == ["nvjet_new"]


def test_a_source_whose_cublas_fails_on_the_device_falls_back_to_the_wheels(tmp_path, monkeypatch):
    from stepcast.estimator import kernel_labels

    monkeypatch.setitem(kernel_labels.SOURCE_CUBLAS, "old_source", "12.0.0.2")
    monkeypatch.setattr(kernel_labels, "cublaslt_library", lambda version: tmp_path / "libcublasLt.so.12")
    asked = old_cublas_fails(tmp_path, monkeypatch)
    out = label_gemms(gemms(source="old_source"), ask=True, cache_dir=tmp_path)
    assert asked == ["12.0.0.2", None] and out["kernel_name"].tolist() == ["nvjet_new"]


def test_a_gemm_on_its_own_gets_the_label_it_gets_among_others(tmp_path, monkeypatch):
    """Single-kernel calls pass the light KernelColumns form; it must be labelled like a frame, or a GEMM's
    prediction would depend on how many rows it was predicted with."""
    from stepcast.estimator.frames import KernelColumns
    from stepcast.estimator.kernel_labels import label_for_features

    monkeypatch.setenv("STEPCAST_CACHE_DIR", str(tmp_path))
    path = cache_file("h100-sxm")
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"m": [4096], "n": [4096], "k": [4096], "dtype": ["bf16"], "kernel_name": ["nvjet_x"],
                  "grid": ["8,16,1"], "kernel_label": ["cublaslt-1"]}).to_parquet(path)
    alone = label_for_features(KernelColumns.from_records(gemms().to_dict("records")))
    among = label_for_features(pd.concat([gemms()] * 20, ignore_index=True))
    assert list(alone["kernel_name"]) == ["nvjet_x"] and list(alone["grid"]) == ["8,16,1"]
    assert set(among["kernel_name"]) == {"nvjet_x"}
