"""``interp report`` and ``interp evaluate`` show their progress on stderr (tqdm, on a terminal): the report per
section with an estimate of the time left, the evaluation per protocol and checkpoint; ``--no-progress`` turns it off.
Their default thread count leaves the cores other processes keep busy (a torch parallel region on a core another
process holds waits for it: the report took minutes instead of seconds on a loaded 2-core machine)."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest
import torch

from interp.cli import main

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class Terminal(io.StringIO):
    """A stderr that says it is a terminal (tqdm draws its bars only there)."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    from interp.model import KMeansTransformer
    from interp.model.checkpoint import save_model
    from interp.model.config import learned_model_config

    torch.manual_seed(0)
    return save_model(tmp_path_factory.mktemp("progress") / "tiny.safetensors",
                      KMeansTransformer(learned_model_config(2, 3, "onehot")))


@pytest.fixture
def terminal(monkeypatch):
    """Call it in the test to make stderr a ``Terminal`` (pytest's capture resets stderr between a fixture's set-up
    and the test)."""
    def attach() -> Terminal:
        stream = Terminal()
        monkeypatch.setattr(sys, "stderr", stream)
        return stream

    return attach


def test_the_report_shows_each_section_and_an_estimate(checkpoint, tmp_path, terminal):
    from interp.report.builder import REPORT_SECTIONS, build_report

    stream = terminal()
    build_report(str(checkpoint), tmp_path / "report.html", n_tasks=2, progress=True)
    shown = stream.getvalue()
    for section in REPORT_SECTIONS:
        assert f"report: {section}" in shown, (section, shown[-2000:])
    assert "100/100" in shown and "<" in shown, shown[-500:]  # the whole estimate done, and tqdm's time left


def test_the_evaluation_shows_each_protocol_and_checkpoint(checkpoint, terminal):
    from interp.evaluate import EvalConfig, evaluate
    from interp.model.checkpoint import load_model
    from interp.tasks import TaskConfig

    models = {"first": load_model(checkpoint), "second": load_model(checkpoint)}
    config = EvalConfig(n_tasks=2, steps=1, inits=("random",), protocols=("main", "shift"), baselines=False)
    stream = terminal()
    evaluate(models, TaskConfig(n=16, d=2, k=3), config, progress=True)
    shown = stream.getvalue()
    for name in models:
        for protocol in config.protocols:
            assert f"evaluate {name}, {protocol}" in shown, (name, protocol, shown[-2000:])
    assert "10/10" in shown, shown[-500:]  # 2 checkpoints x (1 main + 4 shift settings) curves


@pytest.mark.parametrize("command", ["evaluate", "report"])
def test_no_progress_turns_it_off(checkpoint, tmp_path, terminal, command):
    argv = (["evaluate", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "out"), "--tasks", "1", "--steps",
             "1", "--n", "16", "--inits", "random", "--no-baselines"] if command == "evaluate" else
            ["report", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "r.html"), "--tasks", "1"])
    stream = terminal()
    assert main([*argv, "--threads", "1", "--no-progress"]) == 0
    assert stream.getvalue() == ""
    assert main([*argv, "--threads", "1"]) == 0
    assert "%|" in stream.getvalue()  # on by default on a terminal


def test_the_default_threads_leave_the_busy_cores(monkeypatch):
    from interp.cli import default_threads

    cores = len(os.sched_getaffinity(0))
    monkeypatch.setattr(os, "getloadavg", lambda: (float(cores), 0.0, 0.0))
    assert default_threads(8) == 1  # every core busy: one thread
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert default_threads(8) == min(8, cores)  # an idle machine: torch's own default, at most the cores
    monkeypatch.setattr(os, "getloadavg", lambda: (max(0.0, cores - 1.2), 0.0, 0.0))
    assert default_threads(cores) == 1  # one core less than one free: one thread
