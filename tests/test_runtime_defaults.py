"""Speed by default (issue 14, part 3): importing the model applies the allocator setting the batched kernels need
(``interp._runtime``), once per process; ``INTERP_TUNE_ALLOCATOR=0`` leaves the allocator alone. Each case runs in a
fresh process, since the setting is process-wide."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROBE = ("import interp._runtime as runtime; before = runtime.allocator_tuned; import interp; "
         "interp.KMeansTransformer; print(before, runtime.allocator_tuned)")


@pytest.mark.parametrize(("setting", "expected"), [(None, "True"), ("1", "True"), ("0", "False")])
def test_importing_the_model_tunes_the_allocator_unless_opted_out(setting, expected):
    env = {key: value for key, value in os.environ.items() if key != "INTERP_TUNE_ALLOCATOR"}
    if setting is not None:
        env["INTERP_TUNE_ALLOCATOR"] = setting
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert done.stdout.split() == ["None", expected if sys.platform.startswith("linux") else "False"], done.stderr
