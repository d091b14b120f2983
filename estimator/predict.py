"""Predict kernel runtimes for a file of kernel rows (a stable command-line contract).

    stepcast predict --input kernels.csv --output predictions.csv [--hardware ID] [--model URI_OR_PATH]

Input: CSV or parquet, one row per kernel (family, hardware, dtype and the family's key columns; see
profiling/families.py). Output (CSV or parquet by suffix): the input columns plus ``predicted_us``, ``estimator``
(name@version, per row) and ``in_range``. Any error is one line on stderr, exit status 2, and nothing is written.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from stepcast.profiling.atomic import write_bytes_atomic
from stepcast.estimator.kernel_input import KernelInputError, check_kernels, read_kernels
from stepcast.errors import cli_main
from stepcast.preflight import Preflight, refuse_bad_environment


def write_table(frame: pd.DataFrame, path: Path) -> None:
    """CSV or parquet by suffix, written to a temporary file in the same folder and renamed."""
    if path.suffix in {".parquet", ".pq"}:
        import io

        buffer = io.BytesIO()
        frame.to_parquet(buffer, index=False)
        write_bytes_atomic(path, buffer.getvalue())
    elif path.suffix in {".csv", ".txt"}:
        write_bytes_atomic(path, frame.to_csv(index=False).encode())
    else:
        raise KernelInputError(f"{path}: expected an output file ending in .csv or .parquet")


def same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file (also through links, or spelled differently)."""
    if a.exists() and b.exists():
        return a.samefile(b)
    return a.resolve() == b.resolve()


def predict_file(input_path: Path, output_path: Path, hardware: str | None = None, model: str | None = None) -> int:
    from stepcast import estimator

    if output_path.suffix not in {".parquet", ".pq", ".csv", ".txt"}:
        raise KernelInputError(f"{output_path}: expected an output file ending in .csv or .parquet")
    if same_file(input_path, output_path):
        raise KernelInputError(f"{output_path}: --output is the --input file; expected another path (the predictions "
                               "would overwrite the kernels)")
    raw = read_kernels(input_path)
    kernels = check_kernels(raw, name=str(input_path), csv=input_path.suffix not in {".parquet", ".pq"},
                            hardware=hardware)
    result = estimator.load(model).predict_frame(kernels)
    out = raw.copy()
    out["hardware"] = kernels["hardware"]
    out["predicted_us"] = result["predicted_us"].to_numpy()
    out["estimator"] = result["estimator"].to_numpy()
    out["in_range"] = result["in_range"].to_numpy()
    write_table(out, output_path)
    return len(out)


DESCRIPTION = """\
Predict the runtime of each kernel in a CSV or parquet file with the kernel-runtime estimators.

Input columns: family, hardware (catalog id; --hardware fills empty cells), dtype (fp32, tf32, fp16, bf16,
fp8_e4m3, ...) and the family's own (profiling/families.py):
  gemm         m, n, k, batch
  attention    batch, heads_q, heads_kv, seq_q, seq_kv, head_dim, causal, pass
  elementwise  op, numel
  norm         op, rows, cols, pass
  collective   op, bytes, ranks, ranks_per_node
  optimizer    op, params
Output: the input columns plus predicted_us, estimator (name@version) and in_range. A bad row stops the
command with one line naming file, line and column, and nothing is written."""
EPILOG = """\
example:
  stepcast predict --input kernels.csv --output predictions.csv --hardware h100-sxm"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", required=True, type=Path, help="kernel rows (.csv or .parquet)")
    parser.add_argument("--output", required=True, type=Path,
                        help="where to write the predictions (.csv or .parquet, by suffix)")
    parser.add_argument("--hardware", help="catalog id (or vendor name) filling the hardware column where empty")
    parser.add_argument("--model", help="bundle name or path, entry-point name, or "
                                        "models:/kernel-runtime-<family>@champion (default: STEPCAST_ESTIMATOR, "
                                        "else the shipped models/xgboost with the roofline as fallback)")
    parser.set_defaults(func=predict_command)


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``predict`` to the ``stepcast`` command's subcommands."""
    parser = subparsers.add_parser("predict", help="predict kernel runtimes for a CSV or parquet file of kernels",
                                   description=DESCRIPTION, epilog=EPILOG,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return parser


def predict_command(args: argparse.Namespace) -> int:
    check = Preflight()
    check.output_file("--output", args.output)
    refused = check.refuse()
    if refused is not None:
        return refused
    n = predict_file(args.input, args.output, args.hardware, args.model)
    print(f"{n} kernels -> {args.output}", file=sys.stderr)
    return 0


@cli_main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="stepcast predict", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    args = parser.parse_args(argv)
    refused = refuse_bad_environment()
    return refused if refused is not None else predict_command(args)


if __name__ == "__main__":
    sys.exit(main())
