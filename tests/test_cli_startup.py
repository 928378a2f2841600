"""A responsive command line: ``interp --help`` and a rejected option answer without importing
torch, TransformerLens or scikit-learn (importing them costs seconds); a command imports them when it runs.
Checked by the modules a fresh process has loaded, not by a clock, so the test does not depend on the machine's load.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from child_processes import run

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformer_lens", "sklearn", "entmax", "plotly")
PROBE = """
import contextlib, io, json, sys
from interp.cli import main
stderr = io.StringIO()
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr):
    try:
        code = main(sys.argv[1:])
    except SystemExit as stop:
        code = stop.code
print(json.dumps({"code": code, "stderr": stderr.getvalue(),
                  "loaded": sorted(name for name in sys.modules if name.split(".")[0] in %r)}))
""" % (HEAVY,)


def _run(*argv: str) -> dict:
    done = run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # fresh processes
def test_help_imports_no_heavy_module():
    for argv in (["--help"], ["train", "--help"], ["evaluate", "--help"], ["report", "--help"]):
        result = _run(*argv)
        assert result["code"] == 0 and result["loaded"] == [], (argv, result)


@pytest.mark.slow  # fresh processes
def test_a_rejected_training_option_is_refused_before_torch_is_imported(tmp_path):
    for option, value, message in (("--steps", "-1", "argument --steps: expected an integer >= 1, got -1"),
                                   ("--family", "uniform", "family must be one of"),
                                   ("--k", "600", "k=600 must be less than n=512")):
        result = _run("train", "--out", str(tmp_path / "run.safetensors"), option, value)
        assert result["code"] == 2 and message in result["stderr"], result
        assert result["loaded"] == [], result


@pytest.mark.slow  # fresh processes
def test_import_interp_is_lazy_and_its_names_still_resolve():
    code = ("import sys, interp; before = 'torch' in sys.modules; from interp import KMeansTransformer, load_model, "
            "lloyd; from interp.model import ModelConfig; print(before, 'torch' in sys.modules, "
            "KMeansTransformer.__module__, ModelConfig.__module__)")
    done = run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.stdout.split() == ["False", "True", "interp.model.transformer", "interp.model.config"], done.stderr
