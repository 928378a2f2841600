"""The report's sparse-dictionary and interchange-intervention figures of one model's first step
(``abstraction_of_report``), on a few of the report's tasks; small sizes, so together they take a second or two.

Dictionaries (``interp.instruments.dictionary``, docs/dictionaries.md): a sparse autoencoder of
``features_per_code`` x k features fitted on the rows of ``blocks.0.hook_points_resid_post`` (every token of the first
``dictionary_tasks`` tasks), once on the code (scratch) slots alone and once on the whole stream, each beside an
untrained ``random_dictionary`` (the control); reconstruction R^2, mean L0 and dead features, and, for a model with
codes, the feature matching (best signed cosine over the live features) against the code directions of the model's
construction (``known_directions(reference_construction(model))``). The same fit on the construction's own code slots
(same tasks) is the positive control: there the answer is known. A dictionary is read, not intervened on: a feature
that matches a code direction is not shown to be used by the model.

Interchange interventions (``interp.instruments.causal_abstraction``, docs/causal_abstraction.md): base = each of the
first ``pairs`` tasks, source = the next one of them (other points and other initial centroids). The label IIA
(``IIAResult.assignment_accuracy``) is the share of base points whose nearest output centroid after the intervened run
agrees with the one under Lloyd's counterfactual (the base points averaged under the source's assignment); the strict
IIA (every output coordinate within ``tol``) beside it. Three runs: the construction's known alignment of the
assignment (the scratch slots of ``blocks.0.hook_points_resid_post`` copied from the source run), a random subspace of
the same width there (seeded Haar rotation) and no intervention (source = base: the model's own step against Lloyd's
step on the base task); and the known alignment's copy in the model's construction, the positive control (there it
is known to give Lloyd's counterfactual). A model without codes (``embedding="none"``) has no code slots: no code
directions and no known alignment, and the figures say so (the whole-stream dictionary and the no-intervention run
remain).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from torch import Tensor

from interp._checks import InvalidInput, check_positive_int, check_seed
from interp.instruments.causal_abstraction import (
    KNOWN_SITES,
    Alignment,
    IIAResult,
    iia,
    known_alignment,
    random_rotation,
)
from interp.instruments.dictionary import (
    POINTS_HOOK,
    DictionaryScore,
    DictionarySettings,
    fit_dictionary,
    known_directions,
    random_dictionary,
    score_dictionary,
    stream_activations,
)
from interp.instruments.weights import reference_construction
from interp.model import KMeansTransformer

STEP = 0  # the report's instruments are of one step: its hooks are block 0's
# the interchange runs, in the table's order; the last is the construction's (the positive control)
RUNS = ("known alignment", "random subspace", "no intervention", "known alignment, construction")


@dataclass(frozen=True)
class AbstractionSettings:
    """Sizes of the report's dictionary and interchange sections: the dictionaries read every token of the first
    ``dictionary_tasks`` of the report's tasks and have ``features_per_code`` x k features, fitted by ``steps`` Adam
    steps at L1 strength ``l1`` (``DictionarySettings``' other defaults) from ``seed``; the interchange interventions
    use the first ``pairs`` tasks (each with the next as its source), a random subspace seeded by ``seed``, and the
    strict IIA's tolerance ``tol``."""

    dictionary_tasks: int = 8
    features_per_code: int = 2
    steps: int = 1000
    l1: float = 0.3
    seed: int = 0
    pairs: int = 32
    tol: float = 1e-2

    def __post_init__(self) -> None:
        check_positive_int(self.dictionary_tasks, "dictionary_tasks")
        check_positive_int(self.features_per_code, "features_per_code")
        check_positive_int(self.pairs, "pairs", minimum=2)  # each task's source is the next one
        check_seed(self.seed)
        DictionarySettings(steps=self.steps, l1=self.l1, seed=self.seed)  # checks them
        if isinstance(self.tol, bool) or not isinstance(self.tol, (int, float)) or not 0 < self.tol < float("inf"):
            raise InvalidInput(f"tol must be a positive finite number, got {self.tol!r}")

    def dictionary(self, k: int) -> DictionarySettings:
        """The ``DictionarySettings`` of a fit for a model of k clusters."""
        return DictionarySettings(n_features=self.features_per_code * k, l1=self.l1, steps=self.steps, seed=self.seed)

    def describe(self, n: int, k: int) -> str:
        return (f"every token of the first {self.dictionary_tasks} of the tasks above (n = {n}, random initial "
                f"centroids), one step; {self.features_per_code * k} features (= {self.features_per_code} k), "
                f"L1 {self.l1:g}, {self.steps} Adam steps, seed {self.seed}")


@dataclass(frozen=True)
class DictionaryRow:
    """One dictionary of the section: whose stream (``model``: "model" or "construction"), which ``slots``
    ("scratch": the code slots alone, "all": the whole stream), ``fitted`` or untrained, and its ``score``
    (``score.match`` is meaningful only where the figures have ``directions``)."""

    model: str
    slots: str
    fitted: bool
    score: DictionaryScore
    n_features: int
    rows: int


@dataclass(frozen=True)
class AbstractionFigures:
    """What the report's dictionary and interchange sections show; ``no_codes`` says why the model has no code
    directions and no known alignment (then ``directions`` is None and ``interchange`` has only "no intervention")."""

    settings: AbstractionSettings
    n: int  # points per task
    k: int
    hook: str
    no_codes: str | None = None
    directions: Tensor | None = None  # (k, D): the construction's code directions the features are matched to
    dictionaries: list[DictionaryRow] = field(default_factory=list)
    interchange: dict[str, IIAResult] = field(default_factory=dict)  # by RUNS name
    code_width: int = 0  # e, the scratch slots' width (the random subspace's dimension)
    pairs: int = 0
    seconds: dict[str, float] = field(default_factory=dict)  # "dictionaries", "interchange"


def _code_directions(model: KMeansTransformer) -> tuple[Tensor | None, KMeansTransformer | None, str | None]:
    """(the code directions (k, D) of the model's construction, that construction, None), or (None, None, why not)."""
    config = model.config
    if config.embedding == "none" or config.scratch_width == 0:
        return None, None, (f"the model has embedding={config.embedding!r}: its points stream has no code (scratch) "
                            "slots, so it has no code directions to match and no known alignment of the assignment")
    try:
        construction = reference_construction(model)
        directions = known_directions(construction)  # (k, D)
    except InvalidInput as error:
        return None, None, f"no construction to compare with: {error}"
    if directions.shape[1] != config.d_model:
        return None, None, (f"the construction's stream has width {directions.shape[1]}, the model's "
                            f"{config.d_model}: its code directions do not live in the model's stream")
    return directions, construction, None


def _dictionary_rows(model: KMeansTransformer, points: Tensor, init: Tensor, settings: AbstractionSettings,
                     directions: Tensor | None, construction: KMeansTransformer | None) -> list[DictionaryRow]:
    """The fitted dictionaries and their untrained controls (module docstring)."""
    fit_settings = settings.dictionary(model.config.k)
    width = model.config.d_model
    # score_dictionary scores against directions; a model without codes is scored against the first axis, a
    # placeholder whose match the section does not show (its R^2, L0 and dead features do not depend on it)
    target = directions if directions is not None else torch.eye(width, dtype=torch.float64)[:1]
    found = []

    def add(owner: KMeansTransformer, name: str, slots: str, control: bool) -> None:
        rows = stream_activations(owner, points, init, POINTS_HOOK, steps=1, slots=slots)  # (N, D)
        fitted = fit_dictionary(rows, fit_settings)
        found.append(DictionaryRow(name, slots, True, score_dictionary(fitted, rows, target),
                                   fit_settings.n_features, rows.shape[0]))
        if control:
            untrained = random_dictionary(width, fit_settings.n_features, settings.seed, rows.dtype, activations=rows)
            found.append(DictionaryRow(name, slots, False, score_dictionary(untrained, rows, target),
                                       fit_settings.n_features, rows.shape[0]))

    if directions is not None:
        add(model, "model", "scratch", control=True)
    add(model, "model", "all", control=True)
    if construction is not None:
        add(construction, "construction", "scratch", control=False)  # the positive control: the answer is known
    return found


def interchange_runs(model: KMeansTransformer, points: Tensor, init: Tensor, settings: AbstractionSettings,
                     with_codes: bool, construction: KMeansTransformer | None = None) -> dict[str, IIAResult]:
    """The interchange runs of the section (``RUNS``; only "no intervention" where not ``with_codes``, and the
    construction's run only where one is given) on the first ``settings.pairs`` tasks, each with the next of them as
    its source."""
    base_points, base_init = points[: settings.pairs], init[: settings.pairs]
    source_points, source_init = base_points.roll(-1, dims=0), base_init.roll(-1, dims=0)  # task b <- task b + 1
    hook = f"blocks.{STEP}.{KNOWN_SITES['assignment']}"
    runs = {}
    if with_codes:
        known = known_alignment(model, "assignment", STEP)
        width = model.config.scratch_width
        rotation = random_rotation(model.config.d_model, torch.Generator().manual_seed(settings.seed),
                                   base_points.dtype)  # (D, D)
        pairs = (base_points, base_init, source_points, source_init)
        runs["known alignment"] = iia(model, *pairs, known, tol=settings.tol)
        runs["random subspace"] = iia(model, *pairs, Alignment("assignment", hook,
                                                               basis=rotation[:, :width].contiguous()),
                                      tol=settings.tol)
    # source = base: the copy changes nothing, so this is the model's own step against Lloyd's step
    whole = Alignment("assignment", hook, features=slice(0, model.config.d_model))
    runs["no intervention"] = iia(model, base_points, base_init, base_points, base_init, whole, tol=settings.tol)
    if construction is not None:  # the same copy where Lloyd's assignment is known to live (its dtype, float64)
        dtype = next(construction.parameters()).dtype
        runs["known alignment, construction"] = iia(
            construction, base_points.to(dtype), base_init.to(dtype), source_points.to(dtype), source_init.to(dtype),
            known_alignment(construction, "assignment", STEP), tol=settings.tol)
    return runs


def abstraction_of_report(model: KMeansTransformer, points: Tensor, init: Tensor,
                          settings: AbstractionSettings = AbstractionSettings()) -> AbstractionFigures:
    """The dictionary and interchange figures (module docstring) of ``model``'s first step on the report's tasks
    ``points`` (b, n, d) / ``init`` (b, k, d); the model is left in eval mode."""
    model.eval()
    config = model.config
    directions, construction, no_codes = _code_directions(model)
    started = time.perf_counter()
    dictionaries = _dictionary_rows(model, points[: settings.dictionary_tasks], init[: settings.dictionary_tasks],
                                    settings, directions, construction)
    middle = time.perf_counter()
    with torch.no_grad():
        runs = interchange_runs(model, points, init, settings, with_codes=directions is not None,
                                construction=construction)
    return AbstractionFigures(settings, n=points.shape[1], k=config.k, hook=POINTS_HOOK, no_codes=no_codes,
                              directions=directions, dictionaries=dictionaries, interchange=runs,
                              code_width=config.scratch_width, pairs=min(settings.pairs, points.shape[0]),
                              seconds={"dictionaries": middle - started, "interchange": time.perf_counter() - middle})
