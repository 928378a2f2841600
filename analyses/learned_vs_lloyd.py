"""Moved to analyses/studies/learned_vs_lloyd/measure.py; run it with `python -m analyses run learned_vs_lloyd`;
this name is kept for this release."""

import importlib
import runpy
import sys

if __name__ == "__main__":
    runpy.run_module("analyses.studies.learned_vs_lloyd.measure", run_name="__main__", alter_sys=True)
else:
    sys.modules[__name__] = importlib.import_module("analyses.studies.learned_vs_lloyd.measure")
