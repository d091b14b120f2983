"""``stepcast profile``: measure kernels on the hardware at hand into ``datasets/<hardware-id>/`` (a Hydra app).

    stepcast profile                                  # everything, hardware=auto, default budget
    stepcast profile families=[gemm,norm] budget_minutes=2 output_dir=/tmp/ds
    stepcast profile -m families=[gemm],[attention]   # multirun: one job per value
    torchrun --nproc-per-node 8 -m stepcast.profiling families=[collective]

Configs: conf/profiling/config.yaml and one config group per family (conf/profiling/<family>/: auto | cpu | gpu | tiny;
collective also multinode). ``python -m stepcast.profiling.summary datasets/<id>`` prints what a dataset holds;
``profiling/gpu_check.sh`` is the few-minute GPU run.
"""
from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from stepcast.profiling.paths import CONF_DIR
from stepcast.profiling.runner import run
from stepcast.errors import exit_on_error
from stepcast.hydra_apps import register_resolvers, run_hydra_app

register_resolvers()  # ${stepcast_cache:...}: Hydra's run folders go under the stepcast cache


@hydra.main(config_path=str(CONF_DIR / "profiling"), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    """A user's mistake (a :class:`stepcast.errors.StepcastError`) is one line and its exit status; a stop keeps
    every measured point."""
    try:
        with exit_on_error():
            run(cfg)
    except KeyboardInterrupt:
        print("interrupted: every measured point is saved; run the same command again to resume", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    run_hydra_app(main)
