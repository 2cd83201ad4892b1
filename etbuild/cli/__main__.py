"""`python -m etbuild.cli …`: the `etbuild` command."""

import sys

from etbuild.cli import main

sys.exit(main())
