"""What a clustering task is, without torch: the families, the initialisations and ``TaskConfig`` (paper 2 App. D;
``interp.tasks`` draws the tasks). Torch-free so that configs and the command line's argument checks import fast."""

from __future__ import annotations

import math
from dataclasses import dataclass

from interp._checks import InvalidInput, check_choice, check_positive_int

FAMILIES = ("normal", "cauchy", "gumbel", "laplace", "lognormal")
INITS = ("random", "first", "kmeans++", "gonzalez")
NARROW_TASKS = ("pad", "tile")  # how a task of fewer dimensions than a model's fills them (interp.tasks)


@dataclass(frozen=True)
class TaskConfig:
    """One task distribution: n points in d dimensions from a k-component mixture (paper 2 App. D)."""

    n: int = 512
    d: int = 32
    k: int = 10
    family: str = "normal"
    scale: float = 0.1  # per-dimension scale of every component (authors' `es` key)
    anisotropic: bool = False  # scale * U(0,1)^{k x d} instead of a constant scale
    equal_weights: bool = True  # False: mixture weights uniform random, normalised

    def __post_init__(self) -> None:
        check_positive_int(self.n, "n")
        check_positive_int(self.d, "d")
        check_positive_int(self.k, "k")
        if self.k > self.n:
            raise InvalidInput(f"k={self.k} must not exceed n={self.n}")
        check_choice(self.family, "family", FAMILIES)
        if not (isinstance(self.scale, (int, float)) and math.isfinite(self.scale) and self.scale > 0):
            raise InvalidInput(f"scale must be a finite positive number, got {self.scale!r}")
