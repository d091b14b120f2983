"""The software the published torchtitan rows are emulated with: per benchmark file, the releases nearest the
software that was measured.

A published row measures one program: torchtitan, torch and torchao at the commits its file lists. Emulated with
today's releases it is another program (torchtitan 0.3.0 attends with FlexAttention over document masks and
refuses SDPA for language models; torch 2.14 fuses RMSNorm where the 2024 nightly ran it op by op), and the
comparison would say how the program changed, not how good the prediction is. One rule picks each file's stack:
torch is the release branched from the nightlies the file measured, torchao the first release at or after its
commit's date, torchtitan 0.1.0 (2025/06/18), the release of the June 2025 files' commits and the nearest to the
2024 file's ``9dec370`` (no release between):

- the 2024 file (torch ``1963fc8`` and torchao ``eab345c`` of 2024/12/23): torch 2.6.0 (its CUDA 12.4 build),
  torchao 0.8.0;
- the June 2025 files (torch 2.8.0a0 ``5228986c39`` of 2025/05/29 in NGC 25.05, and ``38410cf9`` of 2025/06/14;
  torchao ``0afa4c1`` / ``6243040`` of 2025/06/13): torch 2.8.0 (branched in July 2025; its CUDA 12.8 build),
  torchao 0.12.0. torch 2.6's Inductor fails these files' Float8 + tensor-parallel graphs, and torchao 0.8 has no
  rowwise recipe.

torchtitan 0.1.0 gives SDPA attention, ``nn.RMSNorm``, torchao's Float8 converter with its FSDP all-gather
options, context parallelism over SDPA's ring and the pipeline schedules by name. Where the published trainer
differed from 0.1.0 in a way the command line cannot express, the file's rows name a train spec of
``examples/torchtitan_v010_specs.py`` (registered through torchtitan's ``--experimental.custom_import``) in
:data:`TRAIN_SPECS`: the 2024 trainer kept its loss out of ``torch.compile`` (its ``train.py`` at ``9dec370``),
where 0.1.0 compiles it with the model.

Each stack lives in a throwaway environment of :mod:`benchmarks.emulate.torch_venv` (made on first use: torch is a few
GB, the rest under 500 MB; reused after), never in the project's own.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

TORCHTITAN = "0.1.0"
#: what torchtitan 0.1.0 imports that its wheel does not require
TORCHTITAN_IMPORTS = ("tyro", "tomli", "tensorboard", "datasets", "tiktoken", "blobfile")
ROWWISE_SINCE = "0.9.0"   # torchao's first release with Float8LinearConfig.from_recipe_name


def release(version: str) -> tuple[int, ...]:
    """``"0.12.0"`` -> (0, 12, 0), which compares as releases do."""
    return tuple(int(part) for part in version.split("."))


@dataclass(frozen=True)
class Stack:
    """The releases one benchmark file's rows run on (module docstring)."""
    torch: str
    torchao: str
    torchtitan: str = TORCHTITAN

    @property
    def requirements(self) -> tuple[str, ...]:
        return (f"torchtitan=={self.torchtitan}", f"torchao=={self.torchao}", *TORCHTITAN_IMPORTS)

    def describe(self) -> str:
        return f"torchtitan {self.torchtitan}, torch {self.torch}, torchao {self.torchao}"

    def unsupported(self, float8: str | None) -> str | None:
        """Why the stack cannot run a Float8 recipe, else None: torchtitan 0.1.0 looks rowwise up by name
        (``Float8LinearConfig.from_recipe_name``, torchao 0.9 on); on an older torchao it warns and trains in bf16,
        which would be reported as the rowwise row's prediction."""
        if float8 not in (None, "tensorwise") and release(self.torchao) < release(ROWWISE_SINCE):
            return (f"stepcast: Float8 recipe {float8!r}: torchtitan {self.torchtitan} looks it up in torchao "
                    f"{ROWWISE_SINCE} or later, and this stack's torchao {self.torchao} would train the "
                    "row in bf16 instead (benchmarks/emulate/e2e/titan_stack.py)")
        return None

    def python(self) -> Path:
        """The interpreter of the stack's environment, made or completed first (benchmarks.emulate.torch_venv.VenvError
        when a step fails)."""
        from benchmarks.emulate.torch_venv import Installer

        return Installer().ensure_packages(self.torch, self.requirements).python


STACK_2024 = Stack(torch="2.6.0", torchao="0.8.0")
STACK_2025 = Stack(torch="2.8.0", torchao="0.12.0")
#: benchmark file -> its stack (module docstring); a file not named here is refused by :func:`stack_of`
STACKS = {"llama3_h100_202412_torchtitan.md": STACK_2024,
          "asyncTP_llama3_h100_2025-06_torchtitan.md": STACK_2025,
          "llama3-8b_h200_202506_trainy-whitefiber.md": STACK_2025}

#: benchmark file -> the train spec its rows run (``--model.name``); files not named run torchtitan's ``llama3``
TRAIN_SPECS = {"llama3_h100_202412_torchtitan.md": "llama3_eager_loss"}
SPECS_MODULE = "torchtitan_v010_specs"   # examples/torchtitan_v010_specs.py, beside the launcher


def stack_of(source: str) -> Stack:
    """The stack a benchmark file's rows run on."""
    try:
        return STACKS[source]
    except KeyError:
        raise KeyError(f"stepcast: torchtitan benchmark file {source!r} has no software stack in "
                       "benchmarks/emulate/e2e/titan_stack.py STACKS (expected one of "
                       + ", ".join(sorted(STACKS)) + ")") from None


def train_spec(source: str) -> str:
    """The train spec a benchmark file's rows run."""
    return TRAIN_SPECS.get(source, "llama3")


def describe() -> str:
    """One line naming every file's stack, for the benchmark's table title and docs page."""
    files: dict[Stack, list[str]] = {}
    for source, stack in STACKS.items():
        files.setdefault(stack, []).append(source)
    return "; ".join(f"{stack.describe()} for {', '.join(names)}" for stack, names in files.items())
