"""An interrupt stops ``python -m analyses.paper_budget``: its lanes take no further command, the running commands
stop (each is resumable) and the module exits 130 with its one-line note, for Ctrl-C (SIGINT to its process group;
the commands run in their own groups and get it from the module), SIGTERM and SIGHUP; a second Ctrl-C sends SIGTERM
to a command that ignored the first.

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
from child_processes import popen, running, session_members, stop

ROOT = Path(__file__).resolve().parent.parent
SLEEP = ["timeit", "-n", "1", "-r", "1", "import time; time.sleep(60)"]
STUBBORN = ["timeit", "-n", "1", "-r", "1", "-s", "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN)",
            "import time; time.sleep(60)"]  # ignores SIGINT
WORKER = ["timeit", "-n", "1", "-r", "1", "import os; os.system('sleep 60')"]  # its work in a child process, as a
# sweep's worker pool; while it waits for the child it ignores SIGINT itself (os.system), so only a SIGINT that
# reaches the child (the command's whole group, as a terminal's Ctrl-C) ends it
DRIVER = """
import sys
from analyses import paper_budget
from interp import _arguments
paper_budget.section_commands = lambda results_md: [("sleep", {command!r})] * 3
sys.exit(_arguments.run(paper_budget.main, paper_budget.PROG, ["--lanes", "1"],
                        interrupted="every command is resumable: run the same command to continue"))
"""


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _interrupt(command: list[str], tmp_path: Path, send, background: bool = False) -> tuple[int, str, str, float]:
    """Start the module on three copies of ``command`` (``background``: with SIGINT ignored, as a shell without job
    control starts ``nohup ... &``), call ``send(pid)`` once the first command runs, and return its exit code,
    stderr, printed log and the seconds from the first signal to its exit."""
    log = tmp_path / "out.txt"
    with open(log, "w") as out:
        driver = popen([sys.executable, "-c", DRIVER.format(command=command)], cwd=ROOT, stdout=out,  # own session
                       stderr=subprocess.PIPE, text=True, preexec_fn=_ignore_sigint if background else None)
        try:
            deadline = time.monotonic() + 120
            while "[start]" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert "[start]" in log.read_text(), "the first command never started"
            time.sleep(1.0)  # the command is now sleeping inside timeit
            interrupted = time.monotonic()
            send(driver)
            _, stderr = driver.communicate(timeout=30)
            took = time.monotonic() - interrupted
        finally:
            stop(driver)
    return driver.returncode, stderr, log.read_text(), took


def _stopped_after_one(code: int, stderr: str, printed: str) -> None:
    assert code == 130, stderr
    assert "paper_budget: interrupted; every command is resumable" in stderr
    assert printed.count("[start]") == 1 and printed.count("[end ") == 1  # no further command was taken
    assert "interrupted: stopping 1 running command(s)" in printed


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c to the group", "SIGTERM", "SIGHUP"])
def test_an_interrupt_stops_the_lanes_and_their_commands(how, tmp_path):
    send = {"ctrl-c to the group": lambda driver: os.killpg(driver.pid, signal.SIGINT),
            "SIGTERM": lambda driver: driver.send_signal(signal.SIGTERM),
            "SIGHUP": lambda driver: driver.send_signal(signal.SIGHUP)}[how]
    code, stderr, printed, took = _interrupt(SLEEP, tmp_path, send)
    _stopped_after_one(code, stderr, printed)
    assert took < 20  # the sleeping command stopped (it would run for a minute)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM"])
def test_a_background_run_started_with_sigint_ignored_stops_its_commands_too(how, tmp_path):
    signum = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM}[how]
    code, stderr, printed, took = _interrupt(SLEEP, tmp_path, lambda driver: driver.send_signal(signum),
                                             background=True)
    _stopped_after_one(code, stderr, printed)
    assert "KeyboardInterrupt" in printed and took < 20  # the command got the SIGINT sent it (as Ctrl-C) and ended


@pytest.mark.slow
def test_an_interrupt_reaches_the_worker_processes_of_a_command(tmp_path):
    code, stderr, printed, took = _interrupt(WORKER, tmp_path, lambda driver: driver.send_signal(signal.SIGTERM))
    _stopped_after_one(code, stderr, printed)
    assert took < 20  # the child got the SIGINT and ended (it would sleep for a minute)


@pytest.mark.slow
def test_a_second_ctrl_c_terminates_a_command_that_ignores_the_first(tmp_path):
    def twice(driver):
        os.killpg(driver.pid, signal.SIGINT)
        time.sleep(2.0)
        assert driver.poll() is None  # the command ignores SIGINT, so the module still waits for it
        os.killpg(driver.pid, signal.SIGINT)

    code, stderr, printed, took = _interrupt(STUBBORN, tmp_path, twice)
    _stopped_after_one(code, stderr, printed)
    assert "interrupted again: SIGTERM to 1 command(s)" in printed and took < 20
    assert "[end -15]" in printed  # ended by the SIGTERM


@pytest.mark.slow
def test_a_sigkilled_run_leaves_no_command_running(tmp_path):
    """SIGKILL to the module alone, which runs no code in it: its running command, in a process group of its own,
    dies with it within seconds (instead of sleeping on for its minute; a study would train on for hours)."""
    log = tmp_path / "out.txt"
    with open(log, "w") as out, running([sys.executable, "-c", DRIVER.format(command=SLEEP)], cwd=ROOT, stdout=out,
                                        stderr=subprocess.DEVNULL) as driver:
        deadline = time.monotonic() + 120
        while "[start]" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "[start]" in log.read_text(), "the first command never started"
        time.sleep(1.0)  # the command is now sleeping inside timeit
        assert [member for member in session_members(driver.pid) if member.pid != driver.pid]  # it runs
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=10)
        deadline = time.monotonic() + 5
        while (left := session_members(driver.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert left == [], "left running after the module was SIGKILLed:\n" + "\n".join(map(str, left))


def test_lanes_run_every_command_and_report_the_failed_ones(tmp_path):
    from analyses.paper_budget import Lanes

    queue = [("quick", ["timeit", "-n", "1", "-r", "1", "pass"]), ("missing", ["no_such_module_here"]),
             ("quick", ["timeit", "-n", "1", "-r", "1", "pass"])]
    with open(tmp_path / "out.txt", "w") as log:
        failures = Lanes(queue, 2, log).run()
    printed = (tmp_path / "out.txt").read_text()
    assert failures == [("missing", 1)]  # python -m of a missing module exits 1
    assert printed.count("[start]") == 3 and printed.count("[end 0] quick") == 2 and "[end 1] missing" in printed
