"""Predict kernel runtimes for a file of kernel rows (a stable command-line contract).

    python -m estimator.predict --input kernels.csv --output predictions.csv [--hardware ID] [--model URI_OR_PATH]

Input: CSV or parquet, one row per kernel (family, hardware, dtype and the family's key columns; see
profiling/families.py). Output (CSV or parquet by suffix): the input columns plus ``predicted_us``, ``estimator``
(name@version, per row) and ``in_range``. Any error is one line on stderr, exit status 2, and nothing is written.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from profiling.atomic import write_bytes_atomic
from estimator.kernel_input import KernelInputError, check_kernels, read_kernels
from profiling.errors import report
from profiling.hardware import UnknownHardwareError


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
    import estimator

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m estimator.predict", description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", required=True, type=Path, help="kernel rows (.csv or .parquet)")
    parser.add_argument("--output", required=True, type=Path, help="where to write predictions (.csv or .parquet)")
    parser.add_argument("--hardware", help="catalog id (or vendor name) filling the hardware column where empty")
    parser.add_argument("--model", help="bundle name or path, entry-point name, "
                                        "or models:/kernel-runtime-<family>@champion")
    args = parser.parse_args(argv)
    try:
        n = predict_file(args.input, args.output, args.hardware, args.model)
    except (KernelInputError, UnknownHardwareError, ValueError, OSError) as exc:
        return report(exc)
    print(f"{n} kernels -> {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
