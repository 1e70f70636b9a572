"""`python -m api` runs the spacedock command."""

import sys

from api.cli import main

sys.exit(main())
