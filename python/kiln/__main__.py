"""python -m kiln: the kiln command line (see kiln/cli.py)."""
import sys

from .cli import main

sys.exit(main())
