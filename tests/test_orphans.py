"""A study killed with SIGKILL, which runs no code in it, leaves none of its worker processes training: every worker
dies with the process that started it (``interp._processes.die_with``: ``PR_SET_PDEATHSIG`` on Linux, else a thread
that watches the parent). Without it, the workers of a run of 10^6 steps went on training, reparented to init."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from child_processes import running, session_members

ROOT = Path(__file__).resolve().parents[1]
TINY_SET = ["batch=4", "val_tasks=8", "eval_every=5"]
LONG = ["--steps", "1000000", "--seeds", "0", "--eval-tasks", "2", "--eval-steps", "2", "--workers", "2"]
STUDIES = {  # two or more grid points each, on a pool of two workers, training for 10^6 steps
    "studies": ["analyses.studies", "--study", "lr", "--set", "d=2", "k=3", "n=24", *TINY_SET, *LONG],
    "ablate_embedding": ["analyses.ablate_embedding", "--pairs", "4x6", "--n", "24", "--set", *TINY_SET, *LONG],
}


def _until_alone(session: int, timeout: float) -> list:
    """The running members of ``session`` after waiting up to ``timeout`` seconds for all of them to end."""
    deadline = time.monotonic() + timeout
    while (members := session_members(session)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return members


@pytest.mark.slow
@pytest.mark.parametrize("module", list(STUDIES))
def test_a_sigkilled_study_leaves_no_worker_running(tmp_path, module):
    """SIGKILL to the study's main process alone (not its group): within seconds no process of its session runs."""
    checkpoints = tmp_path / "ck"
    command = [sys.executable, "-m", *STUDIES[module], "--out", str(tmp_path), "--checkpoints", str(checkpoints)]
    with open(tmp_path / "stderr.txt", "w") as stderr, \
            running(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr) as study:
        deadline = time.monotonic() + 120
        while not list(checkpoints.glob("*.safetensors")) and study.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert list(checkpoints.glob("*.safetensors")), (tmp_path / "stderr.txt").read_text()[-2000:]  # training
        workers = [member for member in session_members(study.pid) if member.pid != study.pid]
        assert len(workers) >= 2, workers  # the pool's workers are training
        os.kill(study.pid, signal.SIGKILL)
        study.wait(timeout=10)
        left = _until_alone(study.pid, timeout=5)
        assert left == [], "left running after the study was SIGKILLed:\n" + "\n".join(map(str, left))


def _tied_grandchild(tmp_path: Path, watch: bool) -> list:
    """A child that starts a grandchild tied to it by ``die_with`` (``watch``: the thread that polls the parent, as
    where ``PR_SET_PDEATHSIG`` is missing), then is SIGKILLed; the members of its session still running 5 s later."""
    script = textwrap.dedent(f"""
        import multiprocessing, os, signal, sys, time
        from interp import _processes
        if {watch!r}:
            _processes._prctl = None  # no PR_SET_PDEATHSIG: the watching thread
        def grandchild(parent):
            _processes.die_with(parent)
            time.sleep(600)
        worker = multiprocessing.get_context("fork").Process(target=grandchild, args=(os.getpid(),))
        worker.start()
        print(worker.pid, flush=True)
        time.sleep(1.0)  # the grandchild is tied
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    with running([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True) as child:
        int(child.stdout.readline())  # the grandchild started
        assert child.wait(timeout=60) == -signal.SIGKILL
        return _until_alone(child.pid, timeout=5)


@pytest.mark.parametrize("watch", [False, True], ids=["pdeathsig", "watching thread"])
def test_a_tied_child_dies_with_its_parent(tmp_path, watch):
    assert _tied_grandchild(tmp_path, watch) == []


def test_a_child_whose_parent_is_already_gone_dies_at_once():
    """``die_with`` in a process whose parent is not the one named (it died before the child was tied) kills it."""
    script = "import os, time\nfrom interp import _processes\n_processes.die_with(os.getppid() + 10**6)\ntime.sleep(60)"
    with running([sys.executable, "-c", script], cwd=ROOT) as child:
        assert child.wait(timeout=60) == -signal.SIGKILL


RUNNER = [sys.executable, "-m", "analyses", "run", "lr", "--budget", "quick", "--backend", "ray", "--set", "d=2", "k=3",
          "n=24", *TINY_SET, *LONG]


def _training(session: int) -> list:
    """The Ray tasks of ``session`` that train (``ray::run_group``), not Ray's own idle agents."""
    return [member for member in session_members(session) if "ray::run_group" in member.args]


def _started(tmp_path: Path, study) -> None:
    deadline = time.monotonic() + 180
    while len(_training(study.pid)) < 2 and study.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(_training(study.pid)) == 2, (tmp_path / "stderr.txt").read_text()[-2000:]  # both grid points train


@pytest.mark.slow
def test_a_sigkilled_runner_leaves_no_ray_task_training(tmp_path):
    """SIGKILL to the runner alone: its local Ray instance's raylet ends and kills the training tasks within seconds
    (Ray's doing). Ray's idle agents end on their own about 90 s later (measured); the test ends them itself."""
    command = [*RUNNER, "--out", str(tmp_path / "out"), "--checkpoints", str(tmp_path / "ck")]
    with open(tmp_path / "stderr.txt", "w") as stderr, \
            running(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr) as study:
        _started(tmp_path, study)
        os.kill(study.pid, signal.SIGKILL)
        study.wait(timeout=10)
        deadline = time.monotonic() + 20
        while _training(study.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _training(study.pid) == [], "Ray tasks still training 20 s after the runner was SIGKILLed"
        for member in session_members(study.pid):  # Ray's idle agents, which would end by themselves later
            os.kill(member.pid, signal.SIGKILL)


@pytest.mark.slow
def test_an_interrupted_runner_stops_its_ray_tasks_at_once(tmp_path):
    """SIGINT to the runner alone (as ``kill -INT``; caught even where the suite runs with SIGINT ignored): exit 130
    with what is kept, and within seconds nothing of its session runs, Ray's agents included."""
    command = [*RUNNER, "--out", str(tmp_path / "out"), "--checkpoints", str(tmp_path / "ck")]
    with open(tmp_path / "stderr.txt", "w") as stderr, \
            running(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr) as study:
        _started(tmp_path, study)
        os.kill(study.pid, signal.SIGINT)
        assert study.wait(timeout=60) == 130
        assert "interrupted; finished rows stay and checkpoints resume" in (tmp_path / "stderr.txt").read_text()
        assert _until_alone(study.pid, timeout=15) == []
