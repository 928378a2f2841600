"""``python -m analyses``: the studies' runner (``analyses.framework.runner``).

Ctrl-C, SIGTERM and SIGHUP stop a run (exit 130; finished rows stay, checkpoints resume), SIGINT included when the
run started with it ignored (a background job of a shell without job control), so that ``kill -INT`` works too.
"""

import signal
import sys

from analyses.framework.runner import PROG, main
from interp import _arguments as arguments


def _interrupt(signum, frame):
    raise KeyboardInterrupt


if __name__ == "__main__":
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, _interrupt)
    sys.exit(arguments.run(main, PROG, interrupted="finished rows stay and checkpoints resume: run the same command "
                           "to continue"))
