"""A small PyTorch MLP on the kernel features (CPU training in seconds). Weights as safetensors; normalisation
statistics and architecture in meta.json."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from stepcast.estimator.learned import LearnedEstimator
from stepcast.errors import InputError


#: predictions are clamped to this many standard deviations of the training targets
OUTPUT_CLIP = 4.0


def build_network(inputs: int, hidden: tuple[int, ...]) -> nn.Sequential:
    layers: list[nn.Module] = []
    width = inputs
    for h in hidden:
        layers += [nn.Linear(width, h), nn.SiLU()]
        width = h
    layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)


class MLPEstimator(LearnedEstimator):
    kind = "mlp"

    def __init__(
        self,
        family: str = "gemm",
        target: str = "efficiency",
        spec_tolerance: float = 2.0,
        kernel_config: bool = False,
        timing: bool = False,
        hidden: tuple[int, ...] | list[int] = (128, 128, 64),
        epochs: int = 150,
        batch_size: int = 512,
        learning_rate: float = 3e-3,
        weight_decay: float = 1e-5,
        threads: int = 1,
        seed: int = 0,
    ) -> None:
        super().__init__(family, target, spec_tolerance, kernel_config, timing)
        self.hidden = tuple(int(h) for h in hidden)
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.threads = threads
        self.seed = seed
        self.network: nn.Sequential | None = None
        self.norm: dict[str, list[float]] = {}

    def get_params(self) -> dict[str, Any]:
        return super().get_params() | {
            "hidden": list(self.hidden), "epochs": self.epochs, "batch_size": self.batch_size,
            "learning_rate": self.learning_rate, "weight_decay": self.weight_decay, "threads": self.threads,
            "seed": self.seed,
        }

    def _normalise(self, x: np.ndarray) -> torch.Tensor:
        mean = np.asarray(self.norm["x_mean"], dtype=np.float32)
        std = np.asarray(self.norm["x_std"], dtype=np.float32)
        z = (x - mean) / std
        return torch.from_numpy(np.nan_to_num(z, nan=0.0, posinf=0.0, neginf=0.0).astype(np.float32))

    def _fit_matrix(self, x: np.ndarray, y: np.ndarray) -> None:
        torch.manual_seed(self.seed)
        x_mean = np.nanmean(x, axis=0)
        x_std = np.nanstd(x, axis=0)
        x_mean = np.where(np.isfinite(x_mean), x_mean, 0.0)
        x_std = np.where(np.isfinite(x_std) & (x_std > 1e-6), x_std, 1.0)
        self.norm = {"x_mean": x_mean.tolist(), "x_std": x_std.tolist(),
                     "y_mean": float(np.mean(y)), "y_std": float(np.std(y) or 1.0)}
        xs = self._normalise(x)
        ys = torch.from_numpy(((y - self.norm["y_mean"]) / self.norm["y_std"]).astype(np.float32))[:, None]
        self.network = build_network(xs.shape[1], self.hidden)
        opt = torch.optim.AdamW(self.network.parameters(), lr=self.learning_rate, weight_decay=self.weight_decay)
        steps_per_epoch = max(1, int(np.ceil(len(xs) / self.batch_size)))
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.learning_rate,
                                                    total_steps=self.epochs * steps_per_epoch)
        generator = torch.Generator().manual_seed(self.seed)
        previous_threads = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            self.network.train()
            for _ in range(self.epochs):
                order = torch.randperm(len(xs), generator=generator)
                for start in range(0, len(xs), self.batch_size):
                    idx = order[start:start + self.batch_size]
                    loss = nn.functional.smooth_l1_loss(self.network(xs[idx]), ys[idx], beta=0.1)
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    sched.step()
        finally:
            torch.set_num_threads(previous_threads)
        self.network.eval()

    def _predict_matrix(self, x: np.ndarray) -> np.ndarray:
        if self.network is None:
            raise RuntimeError("mlp estimator is not fitted")
        with torch.inference_mode():
            out = self.network(self._normalise(x))[:, 0].numpy()
        # An MLP extrapolates linearly far outside its data (an unseen device can push the output to absurd
        # values); clamp to OUTPUT_CLIP training standard deviations, like a tree model clamps to its leaves.
        out = np.clip(out, -OUTPUT_CLIP, OUTPUT_CLIP)
        return out * self.norm["y_std"] + self.norm["y_mean"]

    def _extra_meta(self) -> dict[str, Any]:
        return {"normalisation": self.norm}

    def _save_weights(self, path: Path) -> None:
        tmp = path / ".partial.model.safetensors"
        save_file({k: v.contiguous() for k, v in self.network.state_dict().items()}, str(tmp))
        tmp.replace(path / "model.safetensors")

    def _load_weights(self, path: Path, meta: dict[str, Any]) -> None:
        self.norm = meta["normalisation"]
        self.network = build_network(len(self.feature_names), self.hidden)
        weights = path / "model.safetensors"
        try:
            self.network.load_state_dict(load_file(str(weights)))
        except FileNotFoundError:
            raise InputError(f"{weights}: missing (expected the MLP's weights)") from None
        except (SafetensorError, RuntimeError) as exc:  # a damaged file, or weights of another architecture
            raise InputError(f"{weights}: not readable as this MLP's weights ({str(exc).splitlines()[0][:200]})"
                             ) from None
        self.network.eval()
