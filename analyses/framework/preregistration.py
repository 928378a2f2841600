"""Pre-registration: predictions and claims fixed before the measurement that decides them, and their verdicts.

Two kinds of registered statement share this module:

* a ``Prediction`` of one measured figure (the explanations: ``analyses.studies.explain.measure``,
  ``analyses.studies.failures.measure``, ``analyses.studies.slots.measure``, ``analyses.studies.best_model.measure``): a
  value, a tolerance and a kind, ``within``: |m - v| <= t, ``at_most``: m <= v + t, ``at_least``: m >= v - t;
  ``verdict`` says ``confirmed``, ``refuted`` or ``pending`` (nothing measured). The predictions are committed JSON
  files (``analyses/predictions/*.json``) read by ``load_predictions``, which checks every entry before any work;
* a claim of the papers decided by a rule and a control (the training studies, ``analyses.claims``): its ``Verdict``
  has one of the ``OUTCOMES`` reproduced, not reproduced or undecided at this budget.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from interp._checks import InvalidInput, InvalidInputType

# ----- claims: outcomes and the verdict ------------------------------------------------------------------------------

REPRODUCED, NOT_REPRODUCED, UNDECIDED = "reproduced", "not reproduced", "undecided at this budget"
OUTCOMES = (REPRODUCED, NOT_REPRODUCED, UNDECIDED)


@dataclass(frozen=True)
class Verdict:
    """``outcome`` (one of OUTCOMES), the rule's deciding figure and the control's figure."""

    outcome: str
    figure: str
    control_figure: str


# ----- predictions and the verdict rule ------------------------------------------------------------------------------

CONFIRMED, REFUTED, PENDING = "confirmed", "refuted", "pending"  # a prediction's verdicts
KINDS = ("within", "at_most", "at_least")


def _check_number(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputType(f"{name} must be a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise InvalidInput(f"{name} must be finite, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Prediction:
    """A prediction fixed before its measurement: ``value`` and ``tolerance`` of ``kind`` (module docstring)."""

    quantity: str  # what is predicted
    value: float
    tolerance: float
    kind: str  # "within", "at_most" or "at_least"
    method: str  # how the value was computed (never by the intervened model)

    def __post_init__(self) -> None:
        _check_number(self.value, "value")
        if _check_number(self.tolerance, "tolerance") < 0:
            raise InvalidInput(f"tolerance must be >= 0, got {self.tolerance!r}")
        if self.kind not in KINDS:
            raise InvalidInput(f"kind must be one of {KINDS}, got {self.kind!r}")


def verdict(prediction: Prediction, measured: float | None) -> str:
    """``confirmed`` when ``measured`` satisfies the prediction: within: |m - v| <= t; at_most: m <= v + t;
    at_least: m >= v - t. ``refuted`` otherwise; ``pending`` when nothing was measured (None)."""
    if not isinstance(prediction, Prediction):
        raise InvalidInputType(f"prediction must be a Prediction, got {type(prediction).__name__}")
    if measured is None:
        return PENDING
    measured = _check_number(measured, "measured")
    value, tolerance = prediction.value, prediction.tolerance
    if prediction.kind == "within":
        holds = abs(measured - value) <= tolerance
    elif prediction.kind == "at_most":
        holds = measured <= value + tolerance
    else:
        holds = measured >= value - tolerance
    return CONFIRMED if holds else REFUTED


def prediction_of(entry: dict, method: str = "method") -> Prediction:
    """A committed entry {"quantity", "value", "tolerance", "kind", <method>} as a ``Prediction`` (``method``: the
    field that says how the value was computed)."""
    return Prediction(entry["quantity"], entry["value"], entry["tolerance"], entry["kind"], entry[method])


# ----- the committed files -------------------------------------------------------------------------------------------


def load_predictions(path: Path, check: Callable[[dict], object] = prediction_of, required: Iterable[str] = (),
                     grouped: bool = False, optional: bool = False) -> dict | None:
    """A committed predictions file, checked before any work: a JSON object whose "predictions" maps each key to an
    entry (``grouped``: each name to such a mapping), every ``required`` key present and every entry accepted by
    ``check`` (default ``prediction_of``). Errors name the file and the entry.

    Parameters
    ----------
    path : Path
        The file (``analyses/predictions/<name>.json``).
    check : callable
        Called on every entry; raises (``InvalidInput``, ``KeyError``, ``TypeError``) when it is malformed.
    required : iterable of str
        Keys that "predictions" must hold.
    grouped : bool
        The predictions are grouped by a name (a model) first: {"predictions": {name: {key: entry}}}.
    optional : bool
        A missing file gives None; otherwise it is an error.

    Returns
    -------
    dict or None
        The file's content.

    Raises
    ------
    FileNotFoundError
        When the file is missing and not ``optional``.
    InvalidInput
        When it is not such a JSON object, lacks a required key or holds an entry that ``check`` refuses.
    """
    path = Path(path)
    if not path.is_file():
        if optional:
            return None
        raise FileNotFoundError(f"{path} is missing: the predictions are fixed before the run")
    try:
        data = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InvalidInput(f"{path}: not a JSON file: {error}") from None
    predictions = data.get("predictions") if isinstance(data, dict) else None
    if not isinstance(predictions, dict):
        raise InvalidInput(f"{path}: no \"predictions\" object")
    for key in required:
        if key not in predictions:
            raise InvalidInput(f"{path}: no prediction for {key}")
    groups = predictions.items() if grouped else [("", predictions)]
    for name, entries in groups:
        if not isinstance(entries, dict):
            raise InvalidInput(f"{path}: predictions {name} must be an object, got {type(entries).__name__}")
        for key, entry in entries.items():
            try:
                check(entry)
            except (InvalidInput, KeyError, TypeError) as error:
                label = f"{name}/{key}" if grouped else key
                raise InvalidInput(f"{path}: prediction {label}: {error}") from None
    return data
