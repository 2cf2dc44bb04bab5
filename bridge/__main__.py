"""``python -m bridge`` runs the CLI."""

import sys

from bridge.cli.main import main

sys.exit(main())
