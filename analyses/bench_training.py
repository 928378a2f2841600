"""Moved to analyses/studies/bench_training/measure.py; run it with `python -m analyses run bench_training`;
this name is kept for this release."""

import importlib
import runpy
import sys

if __name__ == "__main__":
    runpy.run_module("analyses.studies.bench_training.measure", run_name="__main__", alter_sys=True)
else:
    sys.modules[__name__] = importlib.import_module("analyses.studies.bench_training.measure")
