"""`python -m engine.service`: the engine service (what `dg-lsp serve-engine` and auto-start run)."""

import sys

from engine.service.cli import main

sys.exit(main())
