"""`python -m runner.cli ...` is `convgrid ...`."""

import sys

from runner.cli import main

sys.exit(main())
