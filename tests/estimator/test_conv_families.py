"""estimator.conv_families: the cuDNN kernel family of a convolution call, the shrunk per-family factor fitted on
KernelBench problems, and the table shipped (and checksummed) with a bundle."""
from __future__ import annotations

import json
import math

import pytest

from stepcast.estimator import conv_families as cf
from stepcast.estimator.analytical import RooflineEstimator
from stepcast.estimator.checksums import BundleIntegrityError
from stepcast.estimator.router import FamilyRouter

XMMA_CALL = ["void cudnn::engines_precompiled::nchwToNhwcKernel<float>",
             "sm80_xmma_fprop_implicit_gemm_indexed_wo_smem_tf32f32_tf32f32_f32_nhwckrsc_nhwc",
             "void cudnn::engines_precompiled::nhwcToNchwKernel<float>"]


@pytest.mark.parametrize("names, family", [
    (XMMA_CALL, "tc_fprop"),
    (["void cudnn::winograd_nonfused::winogradForwardData4x4<float>", "volta_sgemm_128x64_nt"], "winograd"),
    (["void fft2d_r2c_32x32<float>", "ampere_gcgemm_64x32_nt", "void fft2d_c2r_32x32<float>"], "fft"),
    (["void cask__5x_cudnn::computeOffsetsKernel<false>", "_5x_cudnn_volta_scudnn_128x32_3dconv_dgrad_small_nn_v1"],
     "scudnn"),
    (["void cudnn::engines_precompiled::setTensor5d_kernel<float>", "void convolveNd_dgrad_float_engine<float>"],
     "dgrad_engine"),
    (["void implicit_convolveNd_sgemm<float, 3, 128>"], "implicit_sgemm"),
    (["void at::native::conv_depthwise2d_forward_kernel<float>"], None),
])
def test_a_call_takes_the_family_of_the_engine_it_ran_not_of_its_layout_transforms(names, family):
    assert cf.call_family(names) == family


def test_a_call_is_its_first_kernel_and_the_op_part_kernels_up_to_the_next_kernel_that_is_not_one():
    #          0 first  1 part  2 memcpy 3 part  4 next call  5 part
    kernel = [True,     True,   False,   True,   True,        True]
    op_part = [False,   True,   None,    True,   False,       True]
    assert cf.call_kernels(0, kernel, op_part) == [0, 1, 3]     # the copy between is skipped, the next call ends it
    assert cf.call_kernels(4, kernel, op_part) == [4, 5]        # the last call runs to the end
    assert cf.call_kernels(0, kernel, op_part, end=2) == [0, 1]


def test_a_family_seen_on_few_problems_is_shrunk_toward_one_and_a_noisy_problem_does_not_move_it():
    table = cf.fit([("fft", math.log(2.0))] + [("scudnn", math.log(0.5))] * 5 + [("scudnn", math.log(50.0))])
    assert table.log_factor["fft"] == pytest.approx(math.log(2.0) / (1 + cf.PRIOR))
    assert table.log_factor["scudnn"] == pytest.approx(math.log(0.5) * 6 / (6 + cf.PRIOR))
    assert table.factor(None) == table.factor("winograd") == 1.0


def problem(gpu: str, measured: float, calls: list[tuple[str | None, float, bool]]) -> dict:
    return {"problem": "p", "gpu": gpu, "measured_ms": measured, "predicted_ms": sum(ms for _, ms, _ in calls),
            "calls": [{"family": f, "ms": ms, "corrected": c} for f, ms, c in calls]}


def test_training_skips_the_gpus_not_fitted_and_problems_mixing_families():
    rows = [problem("t4", 2.0, [("scudnn", 1.0, True)]), problem(cf.NOT_FITTED[0], 4.0, [("scudnn", 1.0, True)]),
            problem("t4", 3.0, [("scudnn", 1.0, True), ("sgemm", 1.0, True)]),
            problem("a10g", 2.0, [("sgemm", 1.0, True), (None, 1.0, False)])]
    assert cf.training_records(rows) == [("scudnn", math.log(2.0)), ("sgemm", 0.0)]
    assert cf.training_records(rows, ["a10g"]) == [("sgemm", 0.0)]


def test_only_the_calls_timed_as_a_gemm_are_scaled():
    table = cf.ConvFamilies({"sgemm": math.log(3.0)})
    row = problem("t4", 1.0, [("sgemm", 1.0, True), ("sgemm", 0.5, False)])
    assert cf.corrected_ms(row, table) == pytest.approx(3.5)


def test_a_table_naming_an_unknown_family_is_refused_naming_the_file(tmp_path):
    path = tmp_path / cf.FILENAME
    cf.write(path, cf.ConvFamilies({"sgemm": 0.1}))
    assert cf.read(path).log_factor == {"sgemm": 0.1}
    doc = json.loads(path.read_text())
    doc["log_factor"]["quantum"] = 1.0
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=f"{cf.FILENAME}: field 'log_factor': unknown family 'quantum'"):
        cf.read(path)


def test_a_bundle_ships_its_table_under_its_checksums(tmp_path):
    router = FamilyRouter({"gemm": RooflineEstimator()})
    router.conv_families = cf.ConvFamilies({"scudnn": -0.3})
    router.save(tmp_path / "b")
    assert FamilyRouter.load(tmp_path / "b").conv_families.log_factor == {"scudnn": -0.3}
    FamilyRouter({"gemm": RooflineEstimator()}).save(tmp_path / "plain")
    assert FamilyRouter.load(tmp_path / "plain").conv_families is None
    cf.write(tmp_path / "plain" / cf.FILENAME, cf.ConvFamilies({"scudnn": 5.0}))  # added after export
    with pytest.raises(BundleIntegrityError, match="not listed"):
        FamilyRouter.load(tmp_path / "plain")


@pytest.mark.parametrize("op, scaled", [("aten.cudnn_convolution.default", True), ("aten::cudnn_convolution", True),
                                        ("aten.cudnn_convolution_transpose.default", True),
                                        ("aten.convolution_backward.default", False),
                                        ("aten::cudnn_convolution_backward_input", False),
                                        ("aten.mm.default", False), (None, False)])
def test_only_convolution_forwards_are_corrected(op, scaled):
    assert cf.corrects(op) is scaled
