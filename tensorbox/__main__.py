"""``python -m tensorbox``: the command line (:mod:`tensorbox._storage.cli`)."""

import sys

from tensorbox._storage.cli import main

if __name__ == "__main__":
    sys.exit(main())
