"""``python -m adapters.cli``: the ``dream`` command without the installed script."""

import sys

from adapters.cli.main import main

sys.exit(main())
