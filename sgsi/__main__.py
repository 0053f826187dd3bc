"""``python -m sgsi ...`` runs the command line (see :mod:`sgsi.cli`)."""

import sys

from .cli import main

sys.exit(main())
