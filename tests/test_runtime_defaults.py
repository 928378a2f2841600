"""Speed by default: importing the model applies the allocator setting the batched kernels need
(``interp._runtime``), once per process; ``INTERP_TUNE_ALLOCATOR=0`` leaves the allocator alone. Each case runs in a
fresh process, since the setting is process-wide."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from child_processes import running

ROOT = Path(__file__).resolve().parent.parent
PROBE = ("import interp._runtime as runtime; before = runtime.allocator_tuned; import interp; "
         "interp.KMeansTransformer; print(before, runtime.allocator_tuned)")


@pytest.mark.slow  # fresh processes
def test_importing_the_model_tunes_the_allocator_unless_opted_out():
    """Unset and "1": tuned; "0": left alone (False where glibc's mallopt is not available). The three fresh
    processes run at once."""
    expected = {None: "True", "1": "True", "0": "False"}
    processes = {}
    with contextlib.ExitStack() as stack:  # all three are killed and reaped however the test ends
        for setting in expected:
            env = {key: value for key, value in os.environ.items() if key != "INTERP_TUNE_ALLOCATOR"}
            if setting is not None:
                env["INTERP_TUNE_ALLOCATOR"] = setting
            processes[setting] = stack.enter_context(running([sys.executable, "-c", PROBE], stdout=subprocess.PIPE,
                                                             stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env))
        for setting, process in processes.items():
            out, err = process.communicate(timeout=120)
            tuned = expected[setting] if sys.platform.startswith("linux") else "False"
            assert out.split() == ["None", tuned], (setting, err)
