"""``python -m analyses``: the studies' runner (``analyses.framework.runner``)."""

import sys

from analyses.framework.runner import PROG, main
from interp import _arguments as arguments

if __name__ == "__main__":
    sys.exit(arguments.run(main, PROG, interrupted="finished rows stay and checkpoints resume: run the same command "
                           "to continue"))
