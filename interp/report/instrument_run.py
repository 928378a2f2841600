"""The instruments at the report's settings: ``run_instruments`` runs probes, weight comparisons, patching, ablations
and surrogates of one model on seeded unseen tasks; ``interp report`` and
``python -m analyses.studies.instruments.measure`` both call it, so the page and the committed JSON show the same
numbers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from interp._checks import check_positive_int, check_seed
from interp.instruments.patching import PatchEffect, ablation_sweep, collapsed_init, patching_sweep
from interp.instruments.probes import ProbeResult, run_probes
from interp.instruments.surrogate import SurrogateFit, fit_surrogates, reference_objectives
from interp.instruments.weights import WeightSimilarity, compare_weights
from interp.model import KMeansTransformer
from interp.tasks import TaskConfig, init_centroids, sample_tasks


@dataclass(frozen=True)
class InstrumentSettings:
    """Tasks the instruments run on: ``probe_tasks`` unseen tasks of n points (seeded by ``seed``, random initial
    centroids seeded by ``seed + 1``) for probes, patching and ablations, one step; the surrogates use their own
    192 + 192 tasks (``fit_surrogates`` defaults)."""

    probe_tasks: int = 48
    n: int = 512
    seed: int = 11

    def __post_init__(self) -> None:
        check_positive_int(self.probe_tasks, "probe_tasks", minimum=2)
        check_positive_int(self.n, "n")
        check_seed(self.seed, "seed")


@dataclass(frozen=True)
class InstrumentResults:
    """Every instrument's figures for one model (one step from random initial centroids)."""

    probes: list[ProbeResult]
    similarities: list[WeightSimilarity]
    patching: list[PatchEffect]  # clean = random init, corrupted = all centroids collapsed onto one
    ablations: list[dict]  # {attention, ablation, log_objective, change}
    surrogates: list[SurrogateFit]
    surrogate_references: dict[str, float]  # learned model, Lloyd and initial centroids after 20 steps


def instrument_tasks(model: KMeansTransformer, settings: InstrumentSettings = InstrumentSettings()):
    """The seeded tasks of ``run_instruments``: (tasks with points (b, n, d) and labels (b, n), init (b, k, d))."""
    config = model.config
    generator = torch.Generator().manual_seed(settings.seed)
    tasks = sample_tasks(TaskConfig(n=settings.n, d=config.d, k=config.k), settings.probe_tasks, generator,
                         dtype=model.codes.dtype)
    init = init_centroids(tasks.points, config.k, "random", settings.seed + 1)  # (b, k, d)
    return tasks, init


INSTRUMENTS = ("probes", "weights", "patching", "ablations", "surrogates", "surrogate references")  # in run order


def run_instruments(model: KMeansTransformer, settings: InstrumentSettings = InstrumentSettings(),
                    starting: Callable[[str], None] | None = None) -> InstrumentResults:
    """Probes, weight similarities, patching, ablations and surrogates of ``model`` on seeded unseen tasks, in
    eval mode (dropout off; the model is left in eval mode). ``starting`` is told the name of each of
    ``INSTRUMENTS`` as it starts (a progress bar)."""
    model.eval()
    tasks, init = instrument_tasks(model, settings)
    points = tasks.points  # (b, n, d)
    corrupted = collapsed_init(init, seed=settings.seed)  # (b, k, d)
    runs = {
        "probes": lambda: run_probes(model, points, init, steps=1),
        "weights": lambda: compare_weights(model),
        "patching": lambda: patching_sweep(model, points, init, corrupted, steps=1),
        "ablations": lambda: ablation_sweep(model, points, init, steps=1),
        "surrogates": lambda: fit_surrogates(model),
        "surrogate references": lambda: reference_objectives(model),
    }
    results = {}
    for name in INSTRUMENTS:
        if starting is not None:
            starting(name)
        results[name] = runs[name]()
    return InstrumentResults(probes=results["probes"], similarities=results["weights"],
                             patching=results["patching"], ablations=results["ablations"],
                             surrogates=results["surrogates"], surrogate_references=results["surrogate references"])
