"""``python -m stepcast``: the same as the ``stepcast`` console command."""
import sys

from stepcast.cli import main

sys.exit(main())
