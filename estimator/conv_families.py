"""A learned correction of convolution times, keyed by the cuDNN kernel family cuDNN picked.

Every cuDNN convolution call is timed as the implicit GEMM of its pass (:func:`profiling.classify.conv_parts`,
Winograd's as its transformed-tile GEMMs) through the GEMM estimator; how far that is from the real time depends
mostly on which engine cuDNN ran (a SIMT ``implicit_convolveNd_sgemm`` is far slower than a TF32 ``xmma`` kernel on
the same GEMM; FFT and Winograd do fewer multiplications; transposed convolutions run dgrad engines). So each call
gets one multiplicative efficiency per family: the median over training problems of log(measured / predicted),
shrunk toward 0 by :data:`PRIOR` pseudo-problems (a family seen on few problems stays near the GEMM row). The data
are KernelBench's eager level-1 convolution forwards (``benchmarks.emulate.conv``), fitted on the training GPUs only.

    python -m stepcast.estimator.conv_families --fit --out models/xgboost/conv_families.json --bundle models/xgboost

A call's family is the first entry of :data:`FAMILIES` whose pattern matches one of its kernels' names (the call's
first kernel carries the row; layout transforms, offset tables and split-K reductions are its ``op_part`` kernels).
"""
from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepcast.errors import InputError, cli_main

FORMAT = "stepcast-conv-families"
FILENAME = "conv_families.json"     # next to a bundle's manifest.json
PRIOR = 3.0                         # pseudo-problems at factor 1 each family's median is shrunk by
#: GPUs whose KernelBench timings are not evidence of a current stack: KernelBench's B200 ran PyTorch 2.5 +
#: CUDA 12.4, built before Blackwell (no sm_100 code), so its times are not fitted (it is still evaluated)
NOT_FITTED = ("b200",)

#: (family, pattern on a kernel name), first match wins: the engines that replace the GEMM first (FFT, Winograd),
#: then the tensor-core implicit GEMMs (dgrad before fprop), the SIMT engines, cuBLAS-style SGEMMs, direct kernels
FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((name, re.compile(pattern)) for name, pattern in (
    ("fft", r"fft\dd_|fft_|gcgemm"),
    ("winograd", r"(?i)winograd"),
    ("tc_dgrad", r"xmma_dgrad|strided_dgrad"),
    ("tc_fprop", r"xmma_fprop|xmma_wgrad"),
    ("cutlass", r"cutlass"),
    ("scudnn", r"scudnn"),
    ("dgrad_engine", r"dgrad"),
    ("implicit_sgemm", r"convolve\w*_sgemm"),
    ("sgemm", r"sgemm"),
    ("direct", r"direct"),
))


def corrects(op: str | None) -> bool:
    """Whether a convolution op's calls are scaled: forwards only (transposed ones included), what the table was
    fitted on; a backward pass's engines (wgrad, a real dgrad) are others, and the V100 ResNet-50 backward calls
    got worse under it (``python -m benchmarks.emulate.conv``: dgrad 21 -> 52-71 %)."""
    from stepcast.profiling.classify import is_convolution_op

    return bool(op) and "backward" not in op.lower() and is_convolution_op(op)


def call_kernels(first: int, kernel: Sequence[bool], op_part: Sequence[Any], end: int | None = None) -> list[int]:
    """Positions of one convolution call's kernels: its first kernel (at ``first``; it carries the row) and the
    ``op_part`` kernels after it, up to the next kernel that is not one or ``end`` (``kernel``: whether each event
    is a kernel; other events between them are skipped). The simulator scales the calls it finds this way
    (:mod:`emulate.sim.durations`), so the benchmark that fits the table groups them the same way."""
    out = [first]
    for n in range(first + 1, len(kernel) if end is None else end):
        if not kernel[n]:
            continue
        if not op_part[n]:
            break
        out.append(n)
    return out


def call_family(names: Iterable[str]) -> str | None:
    """The family of one convolution call from its kernels' names (:data:`FAMILIES`); None when none matches."""
    names = list(names)
    return next((family for family, pattern in FAMILIES if any(pattern.search(n) for n in names)), None)


@dataclass
class ConvFamilies:
    """Per-family log factor on a convolution call's predicted time (absent family: factor 1)."""

    log_factor: dict[str, float] = field(default_factory=dict)
    problems: dict[str, int] = field(default_factory=dict)      # training (problem, GPU) pairs per family
    meta: dict[str, Any] = field(default_factory=dict)

    def factor(self, family: str | None) -> float:
        return math.exp(self.log_factor.get(family, 0.0)) if family else 1.0

    def factor_of(self, names: Iterable[str]) -> float:
        return self.factor(call_family(names))

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": 1, "prior": PRIOR, "log_factor": self.log_factor,
                "factor": {f: round(math.exp(v), 4) for f, v in self.log_factor.items()},
                "problems": self.problems, "meta": self.meta}

    @classmethod
    def from_json(cls, doc: Any, source: Path | str) -> "ConvFamilies":
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise InputError(f"{source}: field 'format': expected '{FORMAT}'")
        logs = doc.get("log_factor")
        if not isinstance(logs, dict) or not all(isinstance(v, (int, float)) for v in logs.values()):
            raise InputError(f"{source}: field 'log_factor': expected an object of family -> number")
        unknown = [f for f in logs if f not in dict(FAMILIES)]
        if unknown:
            raise InputError(f"{source}: field 'log_factor': unknown family '{unknown[0]}' "
                             f"(expected some of {', '.join(dict(FAMILIES))})")
        return cls({f: float(v) for f, v in logs.items()}, dict(doc.get("problems") or {}), dict(doc.get("meta") or {}))


def fit(records: Iterable[tuple[str, float]], prior: float = PRIOR) -> ConvFamilies:
    """Per family, median log(measured / predicted) x n / (n + prior) over ``records`` (family, log ratio): the
    median because single problems are off by 10x on a noisy host; shrunk so that a family seen once stays near 1."""
    by: dict[str, list[float]] = defaultdict(list)
    for family, log_ratio in records:
        if family is not None and math.isfinite(log_ratio):
            by[family].append(log_ratio)
    return ConvFamilies({f: statistics.median(v) * len(v) / (len(v) + prior) for f, v in sorted(by.items())},
                        {f: len(v) for f, v in sorted(by.items())})


def training_records(problems: Iterable[dict[str, Any]], gpus: Iterable[str] | None = None) -> list[tuple[str, float]]:
    """(family, log(measured / predicted)) of each (problem, GPU) whose corrected calls are all of one family
    (``problems``: :func:`estimator.kernelbench.problem_gpus`), on ``gpus`` (default: all but :data:`NOT_FITTED`)."""
    out = []
    for p in problems:
        if (p["gpu"] in NOT_FITTED) if gpus is None else (p["gpu"] not in set(gpus)):
            continue
        families = {c["family"] for c in p["calls"] if c["corrected"]}
        if len(families) == 1 and p["predicted_ms"] > 0:
            out.append((families.pop(), math.log(p["measured_ms"] / p["predicted_ms"])))
    return out


def corrected_ms(problem: dict[str, Any], table: ConvFamilies) -> float:
    """A problem's predicted ms with each corrected call scaled by its family's factor."""
    return problem["predicted_ms"] + sum(c["ms"] * (table.factor(c["family"]) - 1.0)
                                         for c in problem["calls"] if c["corrected"])


def read(path: Path) -> ConvFamilies:
    from stepcast.estimator.bundle import read_json

    return ConvFamilies.from_json(read_json(path), Path(path))


def for_bundle(root: Path) -> ConvFamilies | None:
    """The table shipped next to a bundle's manifest, or None (the caller has verified its checksum)."""
    from stepcast.estimator.bundle import read_extra

    return read_extra(root, FILENAME, ConvFamilies.from_json)


def write(path: Path, table: ConvFamilies) -> None:
    from stepcast.estimator.bundle import write_json_atomic

    write_json_atomic(Path(path), table.to_json())


@cli_main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepcast.estimator.conv_families",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--fit", action="store_true", help="fit the table on KernelBench's conv problems")
    parser.add_argument("--out", type=Path, required=True, help="where to write the table (a bundle folder's "
                        f"{FILENAME}: the bundle's SHA256SUMS and card are updated)")
    parser.add_argument("--bundle", default=None, help="the estimator whose GEMM rows are corrected (default: "
                        "the folder of --out when it is a bundle, else the shipped default)")
    parser.add_argument("--root", type=Path, default=None, help="shared data folder (default: the setting)")
    args = parser.parse_args(argv)
    if not args.fit:
        parser.error("nothing to do (pass --fit)")
    from stepcast.estimator import kernelbench
    from stepcast.estimator.bundle import is_bundle

    folder = args.out.parent
    bundle = args.bundle or (str(folder) if is_bundle(folder) else None)
    # a bad bundle is found before any capture (kernelbench_rows loads the bundle first)
    problems = kernelbench.problem_gpus(kernelbench.kernelbench_rows(args.root, bundle))
    table = fit(training_records(problems))
    table.meta = {"data": "KernelBench level-1 eager convolution forwards (fp32), "
                          "ScalingIntelligence/KernelBench, MIT",
                  "gpus": sorted({p["gpu"] for p in problems} - set(NOT_FITTED)), "bundle": bundle or "default"}
    write(args.out, table)
    if is_bundle(folder):
        from stepcast.estimator.bundle import seal_bundle
        from stepcast.estimator.model_card import add_conv_families

        seal_bundle(folder)
        add_conv_families(folder, table)
    for family, value in table.log_factor.items():
        print(f"{family:16s} x{math.exp(value):.3f}  ({table.problems[family]} problems)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
