"""`python -m pipeline.cli`: the `lessonsync` command without the installed console script."""

import sys

from pipeline.cli import main

sys.exit(main())
