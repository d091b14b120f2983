"""Bundles that never saw one GPU: what the end-to-end benchmark's ``--unseen`` emulates each GPU's labels with.

A user's GPU is most often one nobody profiled. To score that case end to end, each GPU's labels are emulated with
a bundle trained as the shipped one is (``stepcast train family=all model=xgboost``, the shipped bundle's fallback
rules) on every row but that GPU's, of every source and dtype (``data.exclude_hardware``), and with the in-step
calibration of the other GPUs pooled (``STEPCAST_INSTEP_EXCLUDE`` names the GPU: :mod:`emulate.sim.instep`). A
device of the same SM design keeps its rows (the A100 PCIe's NeuSight rows go, Vidur's A100 SXM rows stay): that is
the unseen protocol's device split (:mod:`benchmarks.estimator.unseen`).

Each bundle is trained once per (GPU, committed content of what training reads: ``TRAINING_TREES``) under
``<cache>/unseen_bundles/`` (about 1 to 4 minutes), its MLflow runs in a tracking store beside it, never in the
repository's; a commit that changes none of those folders reuses it.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks.emulate.e2e.cache import tree_digest
from stepcast.profiling.paths import REPO_ROOT, cache_root

SHIPPED = REPO_ROOT / "models" / "xgboost"
#: the unseen protocol's committed results: a routed bundle runs, per (family, device, dtype) situation, the model
#: they choose (estimator/routing.py), the choice made without the held-out GPU's own figures only if they were
ROUTES = REPO_ROOT / "docs" / "results" / "unseen.json"
#: what the shipped bundle was exported with (README: "Train, track, ship")
MAX_TRAIN_ROWS = 30000


#: what a bundle's training reads: its code, its configs and the catalog, the row contract, the shipped rules
TRAINING_TREES = ("estimator", "conf", "profiling", "models/xgboost", "docs/results/unseen.json")


def training_digest() -> str:
    """The committed content of :data:`TRAINING_TREES` (:func:`benchmarks.emulate.e2e.cache.tree_digest`) in the
    checkout at this module's ``REPO_ROOT``, read when called (the default root is fixed where tree_digest is
    defined; a test points this one at a scratch repository)."""
    return tree_digest(TRAINING_TREES, root=REPO_ROOT)


def bundle_dir(hardware: str, routed: bool = False) -> Path:
    return cache_root() / "unseen_bundles" / f"{hardware}-{training_digest()[:12]}{'-routed' if routed else ''}"


def held_out_bundle(hardware: str, routed: bool = False) -> Path:
    """The bundle that never saw ``hardware`` (trained on first use, then reused); ``routed``: with the routes of
    :data:`ROUTES` (their choices rest on every device's figures, the held-out GPU's too: an upper bound on what a
    routed bundle would give, where the unseen protocol's nested ``routed`` figure is the honest one)."""
    out = bundle_dir(hardware, routed)
    if (out / "manifest.json").is_file():
        return out
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "stepcast.estimator.train", "family=all", "model=xgboost", f"export={tmp}",
               f"max_train_rows={MAX_TRAIN_ROWS}", "mlflow.register=false", "mlflow.plots=false", "splits=[]",
               f"rules_from={SHIPPED}", f"version=unseen-{hardware}{'-routed' if routed else ''}",
               f"data.exclude_hardware=[{hardware}]", *([f"routes_from={ROUTES}"] if routed else [])]
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{out.parent / 'mlflow.db'}"}
    done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0 or not (tmp / "manifest.json").is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"training the bundle without {hardware} failed: {tail[0][:300]}")
    tmp.rename(out)  # whole or not at all: a stopped training leaves only the .partial folder
    return out


def unseen_env(hardware: str, model: str, routed: bool = False) -> dict[str, str]:
    """The variables that emulate one label of ``model`` on ``hardware`` as wholly unseen."""
    return {"STEPCAST_ESTIMATOR": str(held_out_bundle(hardware, routed)),
            "STEPCAST_INSTEP_EXCLUDE": f"{model},{hardware}"}
