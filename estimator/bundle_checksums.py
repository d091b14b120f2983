"""Add sha256 checksums to bundles written before the exporter wrote them (the files themselves are not touched).

    python -m stepcast.estimator.bundle_checksums models/xgboost models/mlp

Runs the exporter's own last step (:func:`estimator.bundle.seal_bundle`): SHA256SUMS in every folder the manifest
names and in the bundle. Only for bundles you trust: the checksums vouch for the files as they are now. Errors are one
line, exit status 2.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stepcast.estimator.bundle import seal_bundle
from stepcast.errors import InputError, cli_main


@cli_main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepcast.estimator.bundle_checksums",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("bundles", nargs="+", type=Path, help="bundle folders (holding manifest.json)")
    args = parser.parse_args(argv)
    for bundle in args.bundles:
        if not (bundle / "manifest.json").is_file():
            raise InputError(f"{bundle}: not an estimator bundle (expected manifest.json inside)")
        written = seal_bundle(bundle)
        print(f"{written}: {len(written.read_text().splitlines())} files", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
