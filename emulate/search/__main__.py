"""Entry point: ``stepcast search CONFIG [overrides] [--jobs N] [--ray-address ADDR]``."""
import sys

from stepcast.emulate.search.cli import main

sys.exit(main())
