"""Ctrl-C stops ``python -m analyses.paper_budget``: its lanes take no further command, the running commands stop
(each is resumable) and the module exits 130 with its one-line note, whether the interrupt reached the whole
process group (a terminal's Ctrl-C) or the module's process alone (then it passes SIGINT on to its commands).

The queue here is three copies of a command that sleeps a minute (``python -m timeit``), so a lane that kept taking
commands, or a command that was not stopped, would hold the module far past the limits asserted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SLEEP = ["timeit", "-n", "1", "-r", "1", "import time; time.sleep(60)"]
DRIVER = f"""
import sys
from analyses import paper_budget
from interp import _arguments
paper_budget.section_commands = lambda results_md: [("sleep", {SLEEP!r})] * 3
sys.exit(_arguments.run(paper_budget.main, paper_budget.PROG, ["--lanes", "1"],
                        interrupted="every command is resumable: run the same command to continue"))
"""


@pytest.mark.slow
@pytest.mark.parametrize("whole_group", [True, False])
def test_ctrl_c_stops_the_lanes_and_their_commands(whole_group, tmp_path):
    log = tmp_path / "out.txt"
    with open(log, "w") as out:
        driver = subprocess.Popen([sys.executable, "-c", DRIVER], cwd=ROOT, stdout=out, stderr=subprocess.PIPE,
                                  text=True, start_new_session=True)  # its own group: killpg reaches nothing else
        try:
            deadline = time.monotonic() + 120
            while "[start]" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert "[start]" in log.read_text(), "the first command never started"
            time.sleep(1.0)  # the command is now sleeping inside timeit
            interrupted = time.monotonic()
            if whole_group:
                os.killpg(driver.pid, signal.SIGINT)
            else:
                os.kill(driver.pid, signal.SIGINT)
            _, stderr = driver.communicate(timeout=30)
            took = time.monotonic() - interrupted
        finally:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
    printed = log.read_text()
    assert driver.returncode == 130, stderr
    assert "paper_budget: interrupted; every command is resumable" in stderr
    assert printed.count("[start]") == 1 and printed.count("[end ") == 1  # no further command was taken
    assert "interrupted: stopping 1 running command(s)" in printed
    assert took < 20  # the sleeping command stopped (it would run for a minute)


def test_lanes_run_every_command_and_report_the_failed_ones(tmp_path):
    from analyses.paper_budget import Lanes

    queue = [("quick", ["timeit", "-n", "1", "-r", "1", "pass"]), ("missing", ["no_such_module_here"]),
             ("quick", ["timeit", "-n", "1", "-r", "1", "pass"])]
    with open(tmp_path / "out.txt", "w") as log:
        failures = Lanes(queue, 2, log).run()
    printed = (tmp_path / "out.txt").read_text()
    assert failures == [("missing", 1)]  # python -m of a missing module exits 1
    assert printed.count("[start]") == 3 and printed.count("[end 0] quick") == 2 and "[end 1] missing" in printed
