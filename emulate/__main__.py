"""Entry point: ``stepcast run ...`` (and ``replay`` when emulate.replay provides it)."""
import sys

from stepcast.emulate.cli import main

sys.exit(main())
