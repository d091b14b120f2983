"""Entry point: ``python -m emulate run ...`` (and ``replay`` when emulate.replay provides it)."""
import sys

from emulate.cli import main

sys.exit(main())
