"""The software the published torchtitan rows are emulated with: the releases nearest the software that was measured.

A published row measures one program: torchtitan, torch and torchao at the commits its file lists. Emulated with
today's releases it is another program (torchtitan 0.3.0 attends with FlexAttention over document masks and
refuses SDPA for language models; torch 2.14 fuses RMSNorm where the 2024 nightly ran it op by op), and the
comparison would say how the program changed, not how good the prediction is. So the rows run on:

- torch 2.6.0: the release branched from the nightlies of the 2024 file (torch ``1963fc8``, 2024/12/23); its CUDA
  12.4 build; the June 2025 files ran 2.8 nightlies, whose kernels for these models are the same libraries' (cuBLAS,
  FlashAttention-2 through SDPA, NCCL, Inductor's Triton);
- torchtitan 0.1.0 (2025/06/18): the release of the June 2025 files' commits, and the nearest to the 2024 file's
  ``9dec370`` (no release between): SDPA attention, ``nn.RMSNorm``, torchao's Float8 converter with its FSDP
  all-gather options, context parallelism over SDPA's ring, the pipeline schedules by name;
- torchao 0.8.0: the release of the 2024 file's torchao (``eab345c``, 2024/12/23) and the newest one built for
  torch 2.6.

Where the published trainer differed from 0.1.0 in a way the command line cannot express, the file's rows name a
train spec of ``examples/torchtitan_v010_specs.py`` (registered through torchtitan's ``--experimental.custom_import``)
in :data:`TRAIN_SPECS`: the 2024 trainer kept its loss out of ``torch.compile`` (its ``train.py`` at ``9dec370``),
where 0.1.0 compiles it with the model.

They live in a throwaway environment of :mod:`emulate.torch_venv` (made on first use: torch 2.6.0 is a few GB, the
rest under 500 MB; reused after), never in the project's own.
"""
from __future__ import annotations

from pathlib import Path

TORCH = "2.6.0"
TORCHTITAN = "0.1.0"
TORCHAO = "0.8.0"
REQUIREMENTS = (f"torchtitan=={TORCHTITAN}", f"torchao=={TORCHAO}",
                # what torchtitan 0.1.0 imports that its wheel does not require
                "tyro", "tomli", "tensorboard", "datasets", "tiktoken", "blobfile")


#: benchmark file -> the train spec its rows run (``--model.name``); files not named run torchtitan's ``llama3``
TRAIN_SPECS = {"llama3_h100_202412_torchtitan.md": "llama3_eager_loss"}
SPECS_MODULE = "torchtitan_v010_specs"   # examples/torchtitan_v010_specs.py, beside the launcher


def train_spec(source: str) -> str:
    """The train spec a benchmark file's rows run."""
    return TRAIN_SPECS.get(source, "llama3")


def unsupported(float8: str | None) -> str | None:
    """Why the stack cannot run a Float8 recipe, else None: torchtitan 0.1.0 looks rowwise up by name
    (``Float8LinearConfig.from_recipe_name``, torchao 0.9 on); on torchao 0.8.0 it warns and trains in bf16, which
    would be reported as the rowwise row's prediction."""
    if float8 not in (None, "tensorwise"):
        return (f"stepcast: Float8 recipe {float8!r}: torchtitan {TORCHTITAN} looks it up in torchao 0.9 or later, and "
                f"this stack's torchao {TORCHAO} would train the row in bf16 instead (emulate/e2e/titan_stack.py)")
    return None


def describe() -> str:
    """One line naming the stack, for the benchmark's table title."""
    return f"torchtitan {TORCHTITAN}, torch {TORCH}, torchao {TORCHAO}"


def python() -> Path:
    """The interpreter of the stack's environment, made or completed first (emulate.torch_venv.VenvError when a
    step fails)."""
    from emulate.torch_venv import Installer

    return Installer().ensure_packages(TORCH, REQUIREMENTS).python
