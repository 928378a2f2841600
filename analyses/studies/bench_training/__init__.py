"""Training benchmarks: the model's training step against a plain reference, unrolled steps, a profile."""

from analyses.framework.study import MeasuredStudy

STUDY = MeasuredStudy("Training benchmarks", "analyses.studies.bench_training.measure",
                      {"quick": ("--quick", "--json", "runs/analyses/quick"), "paper": ()},
                      writes=("bench/training.json",))
