"""`python -m runtime.cli`: the `baton` command, as the installed script runs it."""

import sys

from runtime.cli.main import main

sys.exit(main())
