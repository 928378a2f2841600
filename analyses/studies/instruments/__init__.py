"""The instruments on the shipped models: probes, weight comparison, ablations (README's instruments block)."""

from analyses.framework.study import MeasuredStudy

STUDY = MeasuredStudy("Instruments on the shipped models", "analyses.studies.instruments.measure",
                      {"quick": ("--out", "runs/analyses/quick/instruments.json"), "paper": ()},
                      writes=("instruments.json",))
