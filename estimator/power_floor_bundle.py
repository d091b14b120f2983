"""Fit a bundle's power floor (:mod:`estimator.power_floor`) from its training data, and add it to an existing bundle.

    python -m stepcast.estimator.power_floor_bundle --bundle models/xgboost

The figures come from the bundle's GEMM training rows (the devices its card names) plus aiconfigurator's per-tensor
fp8 GEMMs of the same devices (``estimator.importers.aiconfigurator_gemm``: evidence of what the fp8 datapath
sustains within its board's power, not training rows); the exporter (``estimator.train``) fits the same way. Kept
apart from :mod:`estimator.power_floor`, which the tiled model imports, so that the importers and the bundle code are
not part of that model's code (``benchmarks.estimator.unseen.module_closure``).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from stepcast.estimator.power_floor import FILENAME, FLOOR_QUANTILE, PowerFloor, binding, fit, write
from stepcast.errors import InputError, cli_main


def evidence_rows(gemm_rows, root: Path | None = None, fp8: bool = True):
    """What the floor is fitted on: ``gemm_rows`` (a bundle's GEMM training rows, measured ``runtime_us``) and, with
    ``fp8``, aiconfigurator's per-tensor fp8 GEMMs of the same devices (none where ``root`` holds no tables): a
    device a bundle was not trained on gives no figure."""
    import pandas as pd

    from stepcast.estimator.importers import aiconfigurator_gemm
    from stepcast.profiling.paths import shared_data_root

    columns = ["family", "hardware", "dtype", "m", "n", "k", "batch", "runtime_us", "source"]
    rows = gemm_rows[[c for c in columns if c in gemm_rows]]
    if not fp8:
        return rows.reset_index(drop=True)
    extra = aiconfigurator_gemm.load(Path(root) if root is not None else shared_data_root(), "fp8")
    extra = extra[extra["hardware"].isin(set(gemm_rows["hardware"].astype(str)))]
    return pd.concat([rows, extra[columns]], ignore_index=True)


def fit_for_bundle(gemm_rows, root: Path | None = None, fp8: bool = True, router: Any = None,
                   quantile: float = FLOOR_QUANTILE) -> PowerFloor:
    """The floor a bundle trained on ``gemm_rows`` ships (``evidence_rows``), with the sources and devices it came
    from, how often it binds on those measured rows (``meta['binds_measured']``) and, given the bundle's ``router``
    (its floor unset), on the bundle's own predictions of ``gemm_rows`` (``meta['binds_predicted']``)."""
    rows = evidence_rows(gemm_rows, root, fp8)
    runtime = rows["runtime_us"].to_numpy(dtype=np.float64)
    floor = fit(rows, runtime, quantile)
    sources = rows["source"].astype(str) if "source" in rows else np.full(len(rows), "rows")
    floor.meta |= {"sources": sorted({f"{s}/{d}" for s, d in zip(sources, rows["dtype"].astype(str))}),
                   "binds_measured": binding(floor, rows, runtime)}
    if router is not None:
        if router.power_floor is not None:
            raise ValueError("fit_for_bundle: the router already has a power floor (its own predictions are wanted)")
        floor.meta |= {"binds_predicted": binding(floor, gemm_rows, router.predict(gemm_rows)),
                       "bundle_version": router.version}
    return floor


def bundle_gemm_devices(bundle: Path) -> list[str] | None:
    """The devices a bundle's card says its GEMM model was trained on (None without a card)."""
    card = Path(bundle) / "card.json"
    if not card.is_file():
        return None
    data = json.loads(card.read_text()).get("data", [])
    return sorted({d["hardware"] for d in data if d.get("family") == "gemm"})


@cli_main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepcast.estimator.power_floor_bundle",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, required=True, help=f"bundle folder: writes its {FILENAME} from its "
                        "GEMM training rows (the devices its card names), reseals it and updates its card")
    parser.add_argument("--root", type=Path, default=None, help="shared data folder (default: the setting)")
    args = parser.parse_args(argv)
    from stepcast.estimator.bundle import is_bundle, seal_bundle, verified_manifest
    from stepcast.estimator.data import load_measurements
    from stepcast.estimator.model_card import add_power_floor
    from stepcast.estimator.router import FamilyRouter

    if not is_bundle(args.bundle):
        raise InputError(f"{args.bundle}: not an estimator bundle (expected manifest.json inside)")
    if (args.bundle / FILENAME).is_file():   # replaced whatever its format: its figures are not wanted here
        verified_manifest(args.bundle)   # every file, this one too, as sealed before it goes
        (args.bundle / FILENAME).unlink()
        seal_bundle(args.bundle)
    router = FamilyRouter.load(args.bundle)
    gemm = load_measurements(families=["gemm"], root=args.root)
    devices = bundle_gemm_devices(args.bundle)
    if devices is not None:
        gemm = gemm[gemm["hardware"].isin(devices)]
    gemm = gemm[np.isfinite(gemm["runtime_us"]) & (gemm["runtime_us"] > 0)].reset_index(drop=True)
    router.power_floor = None   # the bundle's own predictions, before any floor it ships now
    floor = fit_for_bundle(gemm, args.root, router=router)
    write(args.bundle / FILENAME, floor)
    seal_bundle(args.bundle)
    add_power_floor(args.bundle, floor)
    for key, joules in sorted(floor.joules_per_flop.items()):
        print(f"{key:12s} {joules * 1e12:.4f} pJ/FLOP  ({floor.boards[key]})")
    print(f"binds on measured rows: {floor.meta['binds_measured']}; on the bundle's predictions of them: "
          f"{floor.meta['binds_predicted']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
