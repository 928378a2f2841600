"""Real ``python -m interp.cli`` processes without paying torch's import each time: a "zygote" process imports the
heavy modules once, runs no torch operation (a run would start helper threads, such as tqdm's monitor and jemalloc's
background thread, which ``fork`` does not copy and whose locks a child could then wait on forever) and forks one
child per command. A child runs the ``interp.cli`` module as ``__main__`` exactly
as ``python -m interp.cli`` does (``runpy``), with its stdout and stderr in files, and exits with the code the
interpreter would give (``SystemExit`` with a non-integer code prints it to stderr and exits 1; an uncaught exception
prints its traceback). A child may wait for a gate file before it runs, so that several start at the same instant.
A child has Python's KeyboardInterrupt handler, as ``python -m interp.cli`` from a foreground shell has, and dies with
the zygote; ``close`` kills and reaps the children not waited for (``tests/child_processes.py`` starts the zygote).

Used by the bad-input table, the kill-and-resume test and the concurrent-writer tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from child_processes import popen, stop

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = textwrap.dedent("""
    import importlib, json, os, runpy, signal, sys, time, traceback
    settings = json.loads(sys.argv[1])
    sys.path.insert(0, settings["tests"])
    from child_processes import die_with
    sys.path.pop(0)
    zygote = os.getpid()
    import torch
    torch.set_num_threads(1)
    for name in settings["preload"]:
        importlib.import_module(name)
    print(json.dumps({"imported": True}), flush=True)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "wait":
            deadline = None if request["timeout"] is None else time.monotonic() + request["timeout"]
            while True:
                done, status = os.waitpid(request["pid"], 0 if deadline is None else os.WNOHANG)
                if done:
                    rc = os.waitstatus_to_exitcode(status)
                    break
                if time.monotonic() >= deadline:
                    os.kill(request["pid"], 9)
                    os.waitpid(request["pid"], 0)
                    rc = "timeout"
                    break
                time.sleep(0.005)
            print(json.dumps({"rc": rc}), flush=True)
            continue
        sys.stdout.flush(); sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                signal.signal(signal.SIGINT, signal.default_int_handler)  # what the interpreter installs at start-up
                die_with(zygote)
                for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
                    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    os.dup2(handle, fd)
                    os.close(handle)
                while request["gate"] and not os.path.exists(request["gate"]):
                    time.sleep(0.0005)
                sys.argv = [request["prog"], *request["argv"]]
                try:
                    runpy.run_module("interp.cli", run_name="__main__", alter_sys=True)  # = python -m interp.cli
                    code = 0
                except SystemExit as stop:
                    if stop.code is None or isinstance(stop.code, int):
                        code = stop.code or 0
                    else:
                        print(stop.code, file=sys.stderr)
                except BaseException:
                    traceback.print_exc()  # what the interpreter prints for an uncaught exception
                sys.stdout.flush(); sys.stderr.flush()
            finally:
                os._exit(code)
        print(json.dumps({"pid": pid}), flush=True)
""")


class Zygote:
    """Forks ``python -m interp.cli ARGV`` children from one process that imported ``preload``; ``import_time`` is
    how long the imports took."""

    def __init__(self, workdir: Path, preload: tuple[str, ...] = ("interp.training.train",)):
        self.workdir = workdir
        self.count = 0
        self.outputs: dict[int, tuple[Path, Path]] = {}
        self.asking = False
        settings = json.dumps({"preload": list(preload), "tests": str(Path(__file__).parent)})
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        started = time.perf_counter()
        self.process = popen([sys.executable, "-c", SCRIPT, settings], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, cwd=ROOT, env=env)
        try:
            assert json.loads(self._line()) == {"imported": True}
            self.import_time = time.perf_counter() - started  # about a plain process's start-up before it works
            assert json.loads(self._line()) == {"ready": True}
        except BaseException:
            stop(self.process)
            raise

    def __enter__(self) -> Zygote:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _line(self) -> str:
        line = self.process.stdout.readline()
        assert line, "the zygote process died"
        return line

    def _ask(self, request: dict) -> dict:
        self.asking = True  # until the answer is read: an interrupted question leaves the conversation out of step
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer = json.loads(self._line())
        self.asking = False
        return answer

    def start(self, argv: list[str], gate: Path | None = None) -> int:
        """Fork a child running ``interp ARGV`` (once ``gate`` exists, if given); returns its pid."""
        self.count += 1
        out, err = self.workdir / f"{self.count}.out", self.workdir / f"{self.count}.err"
        pid = self._ask({"op": "start", "argv": argv, "gate": str(gate) if gate else None, "stdout": str(out),
                         "stderr": str(err), "prog": str(ROOT / "interp" / "cli.py")})["pid"]
        self.outputs[pid] = (out, err)
        return pid

    def wait(self, pid: int, timeout: float | None = None) -> tuple[int | str, str, str]:
        """(exit code, stdout, stderr) of the child ``pid`` once it ends ("" for an output it never opened); after
        ``timeout`` seconds it is killed and the code is "timeout"."""
        rc = self._ask({"op": "wait", "pid": pid, "timeout": timeout})["rc"]
        out, err = self.outputs.pop(pid)
        # a child killed before it opened its output files (the kill-and-resume test does that) printed nothing
        return rc, *(path.read_text() if path.exists() else "" for path in (out, err))

    def run(self, argv: list[str], timeout: float = 120) -> tuple[int | str, str, str]:
        """Start ``interp ARGV`` and wait for it (at most ``timeout`` seconds)."""
        return self.wait(self.start(argv), timeout)

    def kill_children(self) -> None:
        """Kill and reap every child not yet waited for (the zygote reaps only when asked, so the pids are theirs)."""
        for pid in list(self.outputs):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
            self.wait(pid, timeout=30)

    def close(self) -> None:
        """Kill the children not waited for, then end the zygote; if it cannot answer, its whole session is killed
        (the children then die with it)."""
        try:
            if self.process.poll() is None and not self.asking:
                self.kill_children()
                self.process.stdin.close()
                self.process.wait(timeout=30)
        finally:
            stop(self.process)
