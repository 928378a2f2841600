"""Moved to analyses/studies/explain/measure.py; run it with `python -m analyses run explain`;
this name is kept for this release."""

import importlib
import runpy
import sys

if __name__ == "__main__":
    runpy.run_module("analyses.studies.explain.measure", run_name="__main__", alter_sys=True)
else:
    sys.modules[__name__] = importlib.import_module("analyses.studies.explain.measure")
