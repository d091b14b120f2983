"""Entry point: ``python -m emulate.search CONFIG [overrides] [--jobs N] [--ray-address ADDR]``."""
import sys

from emulate.search.cli import main

sys.exit(main())
