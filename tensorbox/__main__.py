"""``python -m tensorbox``: the command line (:mod:`tensorbox.cli`)."""

import sys

from tensorbox.cli import main

if __name__ == "__main__":
    sys.exit(main())
