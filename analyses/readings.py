"""Moved to analyses/framework/reading.py (the machinery) and each study folder's reading.py (its words); ``python -m
analyses render`` writes the readings; this name is kept for this release."""

import importlib
import runpy
import sys

if __name__ == "__main__":
    runpy.run_module("analyses.framework.reading", run_name="__main__", alter_sys=True)
else:
    sys.modules[__name__] = importlib.import_module("analyses.framework.reading")
