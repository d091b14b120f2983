"""The NeuSight-structured GEMM model: its bound charges whole tiles over whole waves of the kernel that runs, a
board's power caps its generation's peak, predictions never beat the bound, and it trains, saves and loads through
the common interface. fp32 rows on P100 / V100 / T4 with recorded kernels or batches: nothing asks cuBLASLt."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from stepcast.estimator.analytical import RooflineEstimator
from stepcast.estimator.features import VOCABULARY
from stepcast.estimator.frames import SMALL
from stepcast.estimator.metrics import summary
from stepcast.estimator.models import make_estimator
from stepcast.estimator.power_floor import silicon_keys
from stepcast.estimator.tiled import (BOUND, ENERGY, STRUCTURAL, TiledEstimator, base_clock_joules, fit_joules_per_flop,
                             power_share, tile_features)
from stepcast.estimator.workload import work
from stepcast.profiling.hardware import lookup

FAST = {"epochs": 5, "min_steps": 1000, "batch_size": 128, "learning_rate": 0.01, "power": "bound", "networks": 2}


def gemm(m: int, n: int, k: int, hardware: str = "p100", batch: int = 1, **extra) -> dict:
    return {"family": "gemm", "hardware": hardware, "dtype": "fp32", "m": float(m), "n": float(n), "k": float(k),
            "batch": float(batch)} | extra


def synthetic(n: int = 600, hardware=("p100", "v100-pcie-32gb"), seed: int = 0) -> pd.DataFrame:
    """Batched fp32 GEMMs (never labelled by cuBLASLt) whose time is a launch floor plus the roofline over a
    utilisation that grows with the GEMM's size."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame([gemm(*rng.integers(16, 2048, 3), hardware=rng.choice(hardware), batch=2) for _ in range(n)])
    size = np.log2(frame["m"] * frame["n"] * frame["k"])
    utilisation = 0.2 + 0.7 / (1.0 + np.exp(-(size - 27.0) / 2.0))
    frame["runtime_us"] = 20.0 + RooflineEstimator(compute_efficiency=1.0, memory_efficiency=1.0,
                                                   gpu_fixed_us=0.0).predict(frame) / utilisation
    frame["source"] = "neusight"
    return frame


def test_bound_charges_a_second_wave_when_the_grid_passes_the_sm_count():
    sms = lookup("p100").sm_count
    name = "maxwell_sgemm_128x64_nn"  # cuBLAS M (the row's n) tiled by 128, N (the row's m) by 64
    full = gemm(64, 128 * sms, 256, kernel_name=name, grid=f"{sms},1,1")
    spill = gemm(64, 128 * (sms + 1), 256, kernel_name=name, grid=f"{sms + 1},1,1")
    bound = 2.0 ** tile_features(pd.DataFrame([full, spill])).column(BOUND)
    assert bound[1] == pytest.approx(2.0 * bound[0], rel=1e-4)
    per_cta_us = 2 * 128 * 64 * 256 / (lookup("p100").peak_flops("fp32") / sms) * 1e6
    assert bound[0] == pytest.approx(per_cta_us, rel=1e-4)


def test_bound_charges_exactly_the_waves_of_a_grid_that_fills_the_sms_a_whole_number_of_times():
    # A100 PCIe, 108 SMs: 6 x 6 tiles of 128 x 128 over a batch of 30 is 1,080 CTAs, 10 full waves (the grid read back
    # from its log was 1,080.0000000001 and charged an 11th)
    name = "ampere_sgemm_128x128_nn"
    row = gemm(763, 760, 61, hardware="a100-pcie-40gb", batch=30, kernel_name=name, grid="6,6,30")
    sms = lookup("a100-pcie-40gb").sm_count
    bound = 2.0 ** tile_features(pd.DataFrame([row])).column(BOUND)[0]
    per_cta_us = 2 * 128 * 128 * 61 / (lookup("a100-pcie-40gb").peak_flops("fp32") / sms) * 1e6
    assert bound == pytest.approx(1080 / sms * per_cta_us, rel=1e-4)


def test_a_persistent_kernel_is_charged_its_tiles_over_the_ctas_it_launched():
    # Hopper's xmma kernels launch at most one CTA per SM and loop over the tiles: 1,024 tiles of 128 x 128 on a
    # grid of 128 CTAs are 8 waves of tiles, not one wave of CTAs
    name = "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
    persistent = gemm(4096, 4096, 4096, hardware="h100-sxm", kernel_name=name, grid="32,4,1", dtype="bf16")
    one_wave = gemm(1024, 2048, 4096, hardware="h100-sxm", kernel_name=name, grid="16,8,1", dtype="bf16")
    feats = tile_features(pd.DataFrame([persistent, one_wave]))
    assert 2.0 ** feats.column("log2_waves") == pytest.approx([8.0, 1.0])
    bound = 2.0 ** feats.column(BOUND)
    assert bound[0] == pytest.approx(8.0 * bound[1], rel=1e-4)
    assert feats.column("last_wave_fill")[0] == pytest.approx(1024 / (8 * lookup("h100-sxm").sm_count))


def test_unlabelled_rows_take_the_tile_of_least_quantisation():
    frame = pd.DataFrame([gemm(256, 256, 64, batch=3)])
    feats = tile_features(frame)
    assert feats.column("labelled")[0] == 0.0
    assert feats.column("log2_tile_overhead")[0] == pytest.approx(0.0)  # 256 x 256 is a whole number of tiles


def test_power_share_caps_a_low_power_board_by_its_generations_energy_per_flop():
    v100 = lookup("v100-pcie-32gb")
    frame = pd.DataFrame([gemm(4096, 4096, 4096, hardware="v100-pcie-32gb") for _ in range(30)])
    flops = 2 * 4096.0 ** 3
    runtime = np.full(30, flops / (0.9 * v100.peak_flops("fp32")) * 1e6)  # the V100 sustains 90 % of its peak
    joules = fit_joules_per_flop(frame, runtime)
    assert joules == {"7/fp32": pytest.approx(v100.tdp_w / (0.9 * v100.peak_flops("fp32")))}
    rows = pd.DataFrame([gemm(64, 64, 64, hardware=h) for h in ("t4", "v100-pcie-32gb", "p100")])
    peaks = np.array([lookup(h).peak_flops("fp32") for h in ("t4", "v100-pcie-32gb", "p100")])
    share = power_share(rows, peaks, joules)
    t4 = lookup("t4")
    assert share[0] == pytest.approx(t4.tdp_w / (joules["7/fp32"] * t4.peak_flops("fp32")))
    assert share[0] < 0.6 and share[1] == pytest.approx(0.9)  # 70 W cannot feed the T4; the V100 holds what it showed
    assert share[2] == 1.0  # Pascal was never measured: not capped


def test_fp16_and_bf16_share_their_generations_energy_per_flop_and_the_floor_keeps_them_apart():
    # an L40S measured at bf16 caps a held-out A100's fp16 GEMMs with its figure (one tensor-core datapath), not with
    # the less efficient A40's fp16 one: before, the A40's 2.5 pJ capped the A100's fp16 at half its measured rate
    l40s, a40 = lookup("l40s"), lookup("a40")
    rows = [gemm(4096, 4096, 4096, hardware="l40s", dtype="bf16") for _ in range(30)]
    rows += [gemm(4096, 4096, 4096, hardware="a40", dtype="fp16") for _ in range(30)]
    frame = pd.DataFrame(rows)
    runtime = np.r_[np.full(30, 2 * 4096.0 ** 3 / (0.6 * l40s.peak_flops("bf16")) * 1e6),
                    np.full(30, 2 * 4096.0 ** 3 / (0.8 * a40.peak_flops("fp16")) * 1e6)]
    joules = fit_joules_per_flop(frame, runtime)
    assert joules == {"8/fp16|bf16": pytest.approx(l40s.tdp_w / (0.6 * l40s.peak_flops("bf16")))}
    a100 = lookup("a100-sxm-80gb")
    share = power_share(pd.DataFrame([gemm(64, 64, 64, hardware="a100-sxm-80gb", dtype="fp16")]),
                        np.array([a100.peak_flops("fp16")]), joules)
    assert share[0] == pytest.approx(min(1.0, a100.tdp_w / (joules["8/fp16|bf16"] * a100.peak_flops("fp16"))))
    a40_joules = a40.tdp_w / (0.8 * a40.peak_flops("fp16"))
    assert share[0] > 1.5 * a100.tdp_w / (a40_joules * a100.peak_flops("fp16"))  # about 0.8 against 0.5
    assert set(silicon_keys(frame)) == {"8.9x142/bf16", "8.6x84/fp16"}  # the floor: each die at each dtype


@pytest.fixture(scope="module")
def fitted() -> tuple[TiledEstimator, pd.DataFrame]:
    rows = synthetic()
    train, test = rows.iloc[:450], rows.iloc[450:]
    return TiledEstimator(**FAST).fit(train, train["runtime_us"].to_numpy()), test


def test_learns_the_utilisation_better_than_the_roofline(fitted):
    model, test = fitted
    truth = test["runtime_us"].to_numpy()
    ours = summary(model.predict(test), truth)["mean_ape"]
    roofline = summary(RooflineEstimator().predict(test), truth)["mean_ape"]
    assert ours < 0.5 * roofline


def test_predictions_never_beat_the_bound_even_on_an_unseen_device(fitted):
    model, test = fitted
    unseen = test.assign(hardware="t4")
    for rows in (test, unseen):
        predicted = model.predict(rows)
        feats = tile_features(rows, model.device_features, model.joules_per_flop, model.power)
        inside = ~model.outside(feats.matrix)  # the out-of-range fallback is the roofline's, not the tile bound's
        assert inside.mean() > 0.9
        bound = 2.0 ** feats.column(BOUND)
        assert np.all(np.isfinite(predicted)) and np.all(predicted[inside] >= bound[inside] * (1 - 1e-4))


def fallback_us(model: TiledEstimator, rows: pd.DataFrame) -> np.ndarray:
    """What the out-of-range fallback gives without a power cap: each member's floor of the rows' timing method +
    the analytical roofline, averaged in log like the members' times."""
    roofline = RooflineEstimator().predict(rows)
    feats = tile_features(rows, model.device_features, model.joules_per_flop, model.power)
    timing = model._floor_codes(feats.matrix).numpy()
    return np.exp(np.mean([np.log(np.asarray(f)[timing] + roofline) for f in model.norm["floor_us"]], axis=0))


def test_a_kernel_the_network_never_saw_takes_the_roofline_not_a_whole_tile(fitted):
    """A matrix-vector product runs cuBLAS's gemv kernel (a path no training row ran): the tile bound would charge
    it a whole tile's width of FLOPs, the roofline charges what it reads."""
    model, _ = fitted
    gemv = pd.DataFrame([gemm(1, 4096, 65536, kernel_name="void gemv2T_kernel_val<int, int, float, float, float, "
                              "float, 128, 16, 4, 4, false, false, cublasGemvParams<float const*, float const*, "
                              "float*, float>>", grid="128,1,1")]).assign(source="neusight")
    feats = tile_features(gemv, model.device_features, model.joules_per_flop, model.power)
    assert model.outside(feats.matrix)[0]
    assert model.predict(gemv)[0] == pytest.approx(fallback_us(model, gemv)[0], rel=1e-4)
    kept = TiledEstimator(**(FAST | {"fallback": False}))
    kept.network, kept.norm, kept.feature_names = model.network, model.norm, model.feature_names
    kept.joules_per_flop, kept.support = model.joules_per_flop, model.support
    assert kept.predict(gemv)[0] > 2.0 * model.predict(gemv)[0]


def test_k_per_cta_beyond_the_training_range_takes_the_fallback_and_inside_keeps_the_network(fitted):
    model, test = fitted
    long_k = pd.DataFrame([gemm(256, 256, 2 ** 20, batch=2)]).assign(source="neusight")
    assert model.predict(long_k)[0] == pytest.approx(fallback_us(model, long_k)[0], rel=1e-4)
    inside = test.iloc[:20]
    assert not np.allclose(model.predict(inside), fallback_us(model, inside), rtol=0.01)


def test_saves_and_loads_to_the_same_predictions(fitted, tmp_path):
    model, test = fitted
    again = TiledEstimator.load(model.save(tmp_path / "tiled"))
    assert again.joules_per_flop == model.joules_per_flop
    np.testing.assert_allclose(again.predict(test), model.predict(test), rtol=1e-6)


def test_an_ensemble_predicts_the_geometric_mean_of_its_members():
    train = synthetic(300, seed=3)
    test = synthetic(50, seed=4)
    single = {k: v for k, v in FAST.items() if k != "networks"} | {"networks": 1}
    members = [TiledEstimator(**(single | {"seed": s})).fit(train, train["runtime_us"].to_numpy()).predict(test)
               for s in (7, 8)]
    both = TiledEstimator(**(single | {"seed": 7, "networks": 2})).fit(train, train["runtime_us"].to_numpy())
    np.testing.assert_allclose(both.predict(test), np.sqrt(members[0] * members[1]), rtol=1e-4)


def test_one_slow_host_slows_the_small_kernels_of_an_unseen_device_less_with_a_floor_per_device():
    """Three devices whose small kernels take a 20 us launch, one whose host adds 60 us: one floor per device keeps
    the slow host's cost out of the utilisation, so an unseen device's small kernels are predicted faster."""
    frame = synthetic(800, hardware=("p100", "v100-pcie-32gb", "t4", "a100-pcie-40gb"), seed=5)
    frame.loc[frame["hardware"] == "p100", "runtime_us"] += 60.0
    small = pd.DataFrame([gemm(64, 64, 64, hardware="p4", batch=2) for _ in range(3)]).assign(source="neusight")
    predicted = {}
    for host_floors in (True, False):
        model = TiledEstimator(**(FAST | {"host_floors": host_floors, "base_clock": False}))
        model.fit(frame, frame["runtime_us"].to_numpy())
        predicted[host_floors] = model.predict(small)[0]
    assert predicted[True] < 0.85 * predicted[False]


def test_base_clock_tightens_a_loose_cap_and_an_unseen_devices_share_where_the_generation_was_measured():
    p4, p100 = lookup("p4"), lookup("p100")
    rows = pd.DataFrame([gemm(2048, 2048, 2048, hardware=h) for h in ("p4", "a100-pcie-40gb", "h100-sxm")])
    bound = base_clock_joules(rows)
    assert bound[0] == pytest.approx(p4.tdp_w / (p4.peak_flops("fp32") * p4.base_clock_mhz / p4.max_clock_mhz))
    assert np.isnan(bound[2])  # no base clock in the catalog
    loose = {"6/fp32": p100.tdp_w / (0.9 * p100.peak_flops("fp32"))}  # what a P100 that is not power-limited shows
    plain, tight = (tile_features(rows, joules_per_flop=loose, power="cap", base_clock=b) for b in (False, True))
    flops = 2 * 2048.0 ** 3
    assert 2.0 ** plain.column(ENERGY)[0] == pytest.approx(flops * loose["6/fp32"] / p4.tdp_w * 1e6, rel=1e-4)
    assert 2.0 ** tight.column(ENERGY)[0] == pytest.approx(flops * bound[0] / p4.tdp_w * 1e6, rel=1e-4)
    assert np.isnan(tight.column(ENERGY)[1:]).all()  # Ampere and Hopper never measured: a spec figure adds no cap
    # the network's input: a measured device keeps its generation's share (what its data show), an unseen one
    # takes the tighter figure its base clock gives
    shares = {m: 2.0 ** tile_features(rows, joules_per_flop=loose, power="cap", base_clock=True,
                                      measured=m).column("log2_power_share") for m in (("p4",), ())}
    np.testing.assert_allclose(shares[("p4",)], 2.0 ** plain.column("log2_power_share"))
    assert shares[("p4",)][0] < 0.5
    assert shares[()][0] == pytest.approx(p4.base_clock_mhz / p4.max_clock_mhz, rel=1e-5)


def test_is_built_by_name_and_refuses_other_families():
    assert isinstance(make_estimator("tiled", "gemm", {"device_features": "per_sm"}), TiledEstimator)
    with pytest.raises(ValueError, match="family 'norm'"):
        make_estimator("tiled", "norm")


def power_limited(n: int = 700, seed: int = 1) -> tuple[pd.DataFrame, float]:
    """``synthetic`` V100 and T4 GEMMs, plus 60 large V100 GEMMs at 90 % of peak that set Volta's energy per FLOP;
    a T4 GEMM takes at least its FLOPs at that energy over the T4's 70 W (the power-limited time)."""
    frame = synthetic(n, hardware=("v100-pcie-32gb", "t4"), seed=seed)
    v100 = lookup("v100-pcie-32gb")
    big = pd.DataFrame([gemm(4096, 4096, 1024 * (1 + i % 4), hardware="v100-pcie-32gb", batch=2) for i in range(60)])
    big["runtime_us"] = work("gemm", big).flops / (0.9 * v100.peak_flops("fp32")) * 1e6
    big["source"] = "neusight"
    frame = pd.concat([frame, big], ignore_index=True)
    joules = v100.tdp_w / (0.9 * v100.peak_flops("fp32"))
    energy_us = work("gemm", frame).flops * joules / lookup("t4").tdp_w * 1e6
    t4 = (frame["hardware"] == "t4").to_numpy()
    frame.loc[t4, "runtime_us"] = np.maximum(frame.loc[t4, "runtime_us"], energy_us[t4])
    return frame, joules


def test_cap_mode_gives_each_row_its_power_limited_time_and_none_to_an_unmeasured_generation():
    frame, joules = power_limited()
    rows = pd.DataFrame([gemm(2048, 2048, 2048, hardware=h) for h in ("t4", "a100-pcie-40gb")])
    energy = 2.0 ** tile_features(rows, joules_per_flop={"7/fp32": joules}, power="cap").column(ENERGY)
    assert energy[0] == pytest.approx(2 * 2048.0 ** 3 * joules / lookup("t4").tdp_w * 1e6, rel=1e-4)
    assert np.isnan(energy[1])  # Ampere was never measured: no cap


@pytest.fixture(scope="module")
def capped() -> tuple[TiledEstimator, pd.DataFrame]:
    frame, _ = power_limited()
    train, test = frame.iloc[:500], frame.iloc[500:700]
    return TiledEstimator(**(FAST | {"power": "cap"})).fit(train, train["runtime_us"].to_numpy()), test


def test_cap_mode_never_predicts_a_long_kernel_faster_than_its_board_power_allows(capped):
    model, test = capped
    long = pd.DataFrame([gemm(s, s, s, hardware="t4", batch=4) for s in (1024, 2048, 3072, 4096)]).assign(
        source="neusight")
    energy = 2.0 ** tile_features(long, joules_per_flop=model.joules_per_flop, power="cap",
                                  base_clock=model.base_clock).column(ENERGY)
    credit = max(model.norm["credit_us"])  # each member's time is above its cap, so their mean is above the least
    assert np.all(model.predict(long) >= energy ** 2 / (energy + credit) * (1 - 1e-4))
    assert energy[-1] > 10 * credit  # the largest is held near its power-limited time, not above it by the credit


def test_cap_mode_learns_a_power_limited_board_better_than_the_power_share_alone(capped):
    model, test = capped
    train = power_limited()[0].iloc[:500]
    shared = TiledEstimator(**(FAST | {"power": "feature"})).fit(train, train["runtime_us"].to_numpy())
    t4 = test[test["hardware"] == "t4"]
    truth = t4["runtime_us"].to_numpy()
    assert summary(model.predict(t4), truth)["mean_ape"] < summary(shared.predict(t4), truth)["mean_ape"]


def test_cap_mode_keeps_its_structural_column_from_the_network_and_reloads(capped, tmp_path):
    model, test = capped
    assert all(member[0].in_features == len([n for n in model.feature_names if n not in STRUCTURAL])
               for member in model.network)
    again = TiledEstimator.load(model.save(tmp_path / "capped"))
    assert again.norm["credit_us"] == pytest.approx(model.norm["credit_us"])
    np.testing.assert_allclose(again.predict(test), model.predict(test), rtol=1e-6)


def test_a_timing_method_never_trained_on_pays_the_analytical_kernel_cost_not_the_training_hosts_launch(fitted):
    """Trained on NeuSight's host-launched ops (a 20 us floor), a kernel asked without a source (the emulator's
    in-step kernels, another timing method) takes the analytical per-kernel cost instead of that launch."""
    model, _ = fitted
    small = pd.DataFrame([gemm(64, 64, 64, batch=2)] * (SMALL + 1))  # a frame: light columns carry no source
    in_step = model.predict(small)[0]
    launched = model.predict(small.assign(source="neusight"))[0]
    floor = np.exp(np.mean(np.log([f[VOCABULARY["timing"].index("neusight")] for f in model.norm["floor_us"]])))
    assert launched - in_step == pytest.approx(floor - RooflineEstimator().gpu_fixed_us, rel=0.2)
    assert in_step > RooflineEstimator().gpu_fixed_us
