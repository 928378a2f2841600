"""Sparse dictionaries (sparse autoencoders) on one stream, scored against directions known to be there.

A sparse autoencoder (Bricken et al. 2023, "Towards Monosemanticity: Decomposing Language Models With Dictionary
Learning"; Cunningham et al. 2023, "Sparse Autoencoders Find Highly Interpretable Features in Language Models") reads a
token's activation x (D) as

    f = ReLU(W_enc^T (x/s - b_dec) + b_enc),    x_hat = s (W_dec^T f + b_dec),    ||W_dec[i]|| = 1,

fitted by Adam (learning rate decayed linearly to 0) on mean ||x/s - x_hat/s||^2 + l1 * sum_i f_i: plain L1, every
decoder row renormalised to unit length after each step, so this equals the SAELens penalty sum_i f_i ||W_dec[i]||;
dead features are resampled twice early in training, as Bricken et al. do. The features are the unit decoder rows
W_dec[i], (n_features, D).

Inputs: s is one scalar, E||x/s|| = sqrt(D) (SAELens's "expected_average_only_in"), so ``l1`` means the same on every
hook and no direction or cosine changes; no per-coordinate standardisation (it would rotate the features away from the
stream's coordinates). Centre: by default (``centre="mean"``) b_dec is *fixed* at the mean row, i.e. the rows are
centred and every feature is a direction from the mean token. Where the data take a few values (a construction's
codes) any b_dec reconstructs them equally well with features code_j - b_dec, and a learned b_dec drifts along that
gauge freedom (on one-hot codes it settles near 2/k, where the centred codes are orthogonal, not at their mean 1/k),
so the feature directions would depend on where it stopped; fixing it removes the freedom. ``centre="learned"`` is
Bricken et al.'s learned b_dec, initialised at the mean: right for data with a natural zero (sparse sums of
directions, where most coordinates are off).

Scoring (the toy-model habit of the same papers): for every known direction t_j, the best cosine max_i <W_dec[i], t_j>
over the features, which feature attains it, their mean, the reconstruction R^2 (fraction of variance explained) and
the mean L0 (active features per token). The cosine is signed by default: a ReLU feature fires on one side of its
direction only, so a feature at -t_j does not represent t_j.

The known directions of an exact construction's points stream after a step (``known_directions``) are its code
directions: the step writes the code of each point's assigned centroid into the scratch slots (paper "Transformer
Circuits Can Realize Clustering Algorithms", Thm 2.1, one-hot codes; paper "Leaner Transformers Can Easily Learn to
Cluster", §2, binary codes). The data slots of that stream carry the input x_i, a dense continuous variable that a
sparse dictionary tiles with (region, code) conjunctions rather than separating from the code, so the code directions
are recovered cleanly from the code slots (``slots="scratch"``, equal to what the step writes, ``attn_xc.hook_out``)
and only approximately from the whole stream (docs/dictionaries.md).

The SAE is implemented here (torch, about 80 lines) rather than taken from SAELens: SAELens 6.x requires
transformer-lens < 4 and would replace the pinned transformer-lens 4.x.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from interp._checks import (
    InvalidInput,
    InvalidInputType,
    MemoryNeed,
    check_choice,
    check_count,
    check_float_tensor,
    check_memory,
    check_points_centroids,
    check_seed,
    check_steps,
)
from interp.model import KMeansTransformer

POINTS_HOOK = "blocks.0.hook_points_resid_post"
MAX_FEATURES = 100_000  # dictionary width: beyond this a (n_features, D) pair of matrices is a typo, not a study
MAX_TRAIN_STEPS = 10_000_000  # Adam steps
MAX_BATCH = 1_000_000  # rows per Adam step
MAX_ROWS = 50_000_000  # activation rows one call reads (tokens of all tasks)
MAX_RESAMPLES = 100  # dead-feature resamplings per fit
RESAMPLE_ROWS = 65_536  # rows a resampling reads (a uniform draw where there are more)
CENTRES = ("mean", "learned")  # b_dec: fixed at the rows' mean, or learned from it
SLOTS = ("all", "scratch")  # which slots of the stream the rows keep (the others are set to 0)


def _check_number(value: object, name: str, minimum: float, inclusive: bool) -> float:
    """A finite real number >= ``minimum`` (> where not ``inclusive``), bools refused, naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputType(f"{name} must be a number, got {type(value).__name__}")
    if not math.isfinite(value) or value < minimum or (value == minimum and not inclusive):
        relation = ">=" if inclusive else ">"
        raise InvalidInput(f"{name} must be a finite number {relation} {minimum}, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class DictionarySettings:
    """How a dictionary is fitted: ``n_features`` decoder rows, L1 strength ``l1`` (on inputs scaled to
    E||x|| = sqrt(D)), ``steps`` Adam steps of initial learning rate ``lr`` (decayed linearly to 0) on minibatches of
    ``batch_size`` rows drawn with replacement; ``seed`` fixes the initial weights, the minibatches and the
    resampled rows; ``centre`` "mean" (b_dec fixed at the mean row) or "learned" (module docstring); ``resamples``
    dead-feature resamplings in the first half of training (0: none; ``fit_dictionary``). The defaults recover the
    codes of the exact constructions up to k = 8 (tests/test_dictionary.py); give about twice as many features as
    directions expected."""

    n_features: int = 16
    l1: float = 0.3
    steps: int = 3000
    lr: float = 1e-2
    batch_size: int = 256
    seed: int = 0
    centre: str = "mean"
    resamples: int = 2

    def __post_init__(self) -> None:
        check_count(self.n_features, "n_features", MAX_FEATURES)
        _check_number(self.l1, "l1", 0.0, inclusive=True)
        check_count(self.steps, "steps", MAX_TRAIN_STEPS)
        _check_number(self.lr, "lr", 0.0, inclusive=False)
        check_count(self.batch_size, "batch_size", MAX_BATCH)
        check_seed(self.seed)
        check_choice(self.centre, "centre", CENTRES)
        check_count(self.resamples, "resamples", MAX_RESAMPLES, minimum=0)


@dataclass(frozen=True, eq=False)
class SparseDictionary:
    """A fitted (or random) sparse autoencoder. ``w_enc`` (D, F), ``b_enc`` (F,), ``w_dec`` (F, D) with unit rows,
    ``b_dec`` (D,) (in scaled units), ``scale`` s (inputs are divided by it before encoding)."""

    w_enc: Tensor  # (D, F)
    b_enc: Tensor  # (F,)
    w_dec: Tensor  # (F, D), unit rows
    b_dec: Tensor  # (D,)
    scale: float

    @property
    def d_model(self) -> int:
        return self.w_dec.shape[1]

    @property
    def n_features(self) -> int:
        return self.w_dec.shape[0]

    @property
    def features(self) -> Tensor:
        """The unit feature directions, the decoder rows (n_features, D)."""
        return self.w_dec

    def _rows(self, x: object, name: str = "x") -> Tensor:
        x = check_float_tensor(x, name, 2, "(N, D)")
        if x.shape[1] != self.d_model:
            raise InvalidInput(f"{name} has {x.shape[1]} features per row but the dictionary reads D={self.d_model}")
        return x

    def encode(self, x: Tensor) -> Tensor:
        """Feature activations f = ReLU(W_enc^T (x/s - b_dec) + b_enc) of rows x (N, D) -> (N, F)."""
        x = self._rows(x).to(self.w_enc)  # (N, D)
        return torch.relu((x / self.scale - self.b_dec) @ self.w_enc + self.b_enc)  # (N, F)

    def decode(self, f: Tensor) -> Tensor:
        """Reconstruction x_hat = s (W_dec^T f + b_dec) of activations f (N, F) -> (N, D)."""
        f = check_float_tensor(f, "f", 2, "(N, n_features)")
        if f.shape[1] != self.n_features:
            raise InvalidInput(f"f has {f.shape[1]} columns but the dictionary has {self.n_features} features")
        return self.scale * (f.to(self.w_dec) @ self.w_dec + self.b_dec)  # (N, D)

    def reconstruct(self, x: Tensor) -> Tensor:
        """decode(encode(x)) for rows x (N, D) -> (N, D)."""
        return self.decode(self.encode(x))


# ----- activations -------------------------------------------------------------------------------------------
def scratch_slots(model: KMeansTransformer) -> slice:
    """The code (scratch) slots d..d+e-1 of the model's streams."""
    config = model.config
    return slice(config.d, config.d + config.scratch_width)


@torch.no_grad()
def stream_activations(model: KMeansTransformer, points: Tensor, centroids: Tensor, hook: str = POINTS_HOOK,
                       steps: int | None = None, slots: str = "all") -> Tensor:
    """The activations of ``hook`` as rows (N, D), N = batch x tokens (every token of every task, task-major), from
    one ``run_with_cache`` in eval mode and the fixed slot order, caching only that hook.

    points (b, n, d) and centroids (b, k, d) in any float dtype (cast to the model's); ``steps`` as the model's
    forward (None: its default; it must reach the hook's block). ``slots="scratch"`` keeps the code slots d..d+e-1
    and sets every other slot to 0 (rows stay D wide, so directions keep the stream's coordinates): on an exact
    construction's ``hook_points_resid_post`` this is exactly what the step wrote, ``attn_xc.hook_out``."""
    if not isinstance(model, KMeansTransformer):
        raise InvalidInputType(f"model must be a KMeansTransformer, got {type(model).__name__}")
    points, centroids = check_points_centroids(points, centroids, d=model.config.d)
    if not isinstance(hook, str):
        raise InvalidInputType(f"hook must be a hook name (str), got {type(hook).__name__}")
    if steps is not None:
        steps = check_steps(steps)
    check_choice(slots, "slots", SLOTS)
    if points.shape[0] * points.shape[1] > MAX_ROWS:
        raise InvalidInput(f"points give {points.shape[0] * points.shape[1]:,} rows, more than {MAX_ROWS:,}")
    dtype = next(model.parameters()).dtype
    was_training = model.training
    model.eval()
    try:
        _, cache = model.run_with_cache(points.to(dtype), centroids.to(dtype), steps=steps, slot_order="fixed",
                                        names_filter=lambda name: name == hook)
    finally:
        model.train(was_training)
    if hook not in cache.cache_dict:
        raise InvalidInput(f"hook {hook!r} was not recorded: not a hook point of the model, or its block is beyond "
                           f"the steps run")
    activation = cache.cache_dict[hook]  # (b, t, D)
    if activation.ndim != 3:
        raise InvalidInput(f"hook {hook!r} records shape {tuple(activation.shape)}, not a stream (batch, tokens, D)")
    rows = activation.reshape(-1, activation.shape[-1]).clone()  # (N, D)
    if slots == "scratch":
        if rows.shape[1] != model.config.d_model or model.config.scratch_width == 0:
            raise InvalidInput(f"slots='scratch' needs a stream of width D={model.config.d_model} with code slots; "
                               f"hook {hook!r} has width {rows.shape[1]}, scratch width {model.config.scratch_width}")
        keep = torch.zeros(rows.shape[1], dtype=torch.bool)  # (D,)
        keep[scratch_slots(model)] = True
        rows[:, ~keep] = 0
    return rows


# ----- known directions --------------------------------------------------------------------------------------
def known_directions(model: KMeansTransformer, centred: bool = True) -> Tensor:
    """The code directions of a construction's points stream after a step, unit D-vectors (m, D), in the model's dtype.

    After a step the points stream is [x_i; code(a_i); (||x_i||^2)]: the scratch slots d..d+e-1 hold the code of x_i's
    assigned centroid a_i (``model.codes``, (k, e)), every other slot is the input. A token holds exactly one code,
    so the stream's code part takes k values, k atoms a sparse dictionary should give one feature each.

    ``centred=True`` (default): direction j is code_j - mean_j code_j in the scratch slots (zeros elsewhere),
    normalised; the mean is over the k codes (with a random-subset start the slots are exchangeable, so every code
    is equally frequent in expectation and this is the expected mean row). A dictionary's features are directions
    from its centre b_dec, and ``fit_dictionary`` centres at the rows' mean (``centre="mean"``), so these are the
    directions its code features should take. They also give every cluster a direction, cluster 0's included:

    * one-hot (e = k): e_{d+j} - 1/k, m = k (cosine sqrt(1 - 1/k) with the raw e_{d+j});
    * binary (e = ceil(log2 k)): the LSB-first bits of j minus the mean bits; for k = 2^e these are the k corners
      (+-1/2)^e of the code cube, m = k. Codes of several bits are *not* split into bit directions: a sparse
      dictionary should give each code its own feature, since one unit feature per code costs ||code_j - mean||_2
      of L1 per token and the bit features it sums cost ||code_j - mean||_1.

    ``centred=False``: code_j itself, normalised (one-hot: the unit vectors e_{d+j}, m = k). A binary code 0 (cluster
    0) is all zeros and has no direction (a cluster-0 point is the absence of every code), so only the nonzero codes
    are returned, m = k - 1. These are the features of a dictionary centred at the zero code, not at the mean.

    A code that equals the mean (one-hot k = 1) has no direction and is left out. ``embedding="none"`` has no scratch
    slots, hence no code directions: refused."""
    if not isinstance(model, KMeansTransformer):
        raise InvalidInputType(f"model must be a KMeansTransformer, got {type(model).__name__}")
    if not isinstance(centred, bool):
        raise InvalidInputType(f"centred must be a bool, got {type(centred).__name__}")
    config = model.config
    if config.embedding == "none" or config.scratch_width == 0:
        raise InvalidInput("model has embedding='none': its points stream has no code slots, so no code directions")
    codes = model.codes.detach()  # (k, e)
    if centred:
        codes = codes - codes.mean(dim=0)  # (k, e)
    codes = codes[codes.norm(dim=1) > 1e-12]  # (m, e): codes with a direction
    if codes.shape[0] == 0:
        raise InvalidInput(f"the k={config.k} codes have no direction (every code equals the centre)")
    directions = codes.new_zeros((codes.shape[0], config.d_model))  # (m, D)
    directions[:, scratch_slots(model)] = codes
    return directions / directions.norm(dim=1, keepdim=True)  # (m, D)


# ----- fitting -----------------------------------------------------------------------------------------------
def _input_scale(x: Tensor) -> float:
    """s with E||x/s|| = sqrt(D) (1 for an all-zero input)."""
    mean_norm = float(x.norm(dim=1).mean())
    return mean_norm / math.sqrt(x.shape[1]) if mean_norm > 0 else 1.0


def random_dictionary(d_model: int, n_features: int, seed: int = 0, dtype: torch.dtype = torch.float64,
                      activations: Tensor | None = None) -> SparseDictionary:
    """An untrained dictionary, the control: unit decoder rows uniform on the sphere (seeded), W_enc = W_dec^T,
    b_enc = 0, b_dec the mean of ``activations`` (scaled as ``fit_dictionary`` scales them) where given, else 0."""
    d_model = check_count(d_model, "d_model", MAX_FEATURES)
    n_features = check_count(n_features, "n_features", MAX_FEATURES)
    check_seed(seed)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise InvalidInputType(f"dtype must be a floating torch.dtype, got {dtype!r}")
    generator = torch.Generator().manual_seed(seed)
    w_dec = torch.randn((n_features, d_model), generator=generator, dtype=torch.float64).to(dtype)  # (F, D)
    w_dec = w_dec / w_dec.norm(dim=1, keepdim=True)
    scale, b_dec = 1.0, torch.zeros(d_model, dtype=dtype)  # (D,)
    if activations is not None:
        activations = check_float_tensor(activations, "activations", 2, "(N, D)")
        if activations.shape[1] != d_model:
            raise InvalidInput(f"activations have D={activations.shape[1]} but d_model={d_model}")
        scale = _input_scale(activations)
        b_dec = (activations / scale).mean(dim=0).to(dtype)  # (D,)
    return SparseDictionary(w_enc=w_dec.T.clone(), b_enc=torch.zeros(n_features, dtype=dtype), w_dec=w_dec,
                            b_dec=b_dec, scale=scale)


@torch.no_grad()
def _resample_dead(x_all: Tensor, w_enc: Tensor, b_enc: Tensor, w_dec: Tensor, b_dec: Tensor,
                   optimiser: torch.optim.Optimizer, generator: torch.Generator) -> int:
    """Bricken et al.'s resampling: features active on none of (up to) ``RESAMPLE_ROWS`` rows restart at rows drawn
    with probability proportional to their squared reconstruction error: W_dec[i] = unit(x - b_dec), W_enc[:, i] =
    the same times 0.2 x the mean encoder norm of the live features, b_enc[i] = 0, Adam's moments of i zeroed.
    Returns the number of features resampled."""
    rows = x_all.shape[0]
    sample = x_all if rows <= RESAMPLE_ROWS else x_all[torch.randint(rows, (RESAMPLE_ROWS,), generator=generator)]
    f = torch.relu((sample - b_dec) @ w_enc + b_enc)  # (R, F)
    dead = torch.nonzero(~(f > 0).any(dim=0)).flatten()  # (n_dead,)
    error = ((sample - f @ w_dec - b_dec) ** 2).sum(dim=1)  # (R,)
    if dead.numel() == 0 or not bool((error > 0).any()):
        return 0
    picked = torch.multinomial(error, dead.numel(), replacement=True, generator=generator)  # (n_dead,)
    direction = sample[picked] - b_dec  # (n_dead, D)
    norm = direction.norm(dim=1, keepdim=True)  # (n_dead, 1)
    keep = norm.flatten() > 0
    dead, direction = dead[keep], direction[keep] / norm[keep]
    alive = torch.ones(w_enc.shape[1], dtype=torch.bool)
    alive[dead] = False
    encoder_norm = float(w_enc[:, alive].norm(dim=0).mean()) if bool(alive.any()) else 1.0
    w_dec[dead] = direction
    w_enc[:, dead] = 0.2 * encoder_norm * direction.T
    b_enc[dead] = 0
    for parameter, index in ((w_dec, (dead,)), (w_enc, (slice(None), dead)), (b_enc, (dead,))):
        state = optimiser.state.get(parameter, {})
        for moment in ("exp_avg", "exp_avg_sq"):
            if moment in state:
                state[moment][index] = 0
    return int(dead.numel())


def fit_dictionary(activations: Tensor, settings: DictionarySettings = DictionarySettings()) -> SparseDictionary:
    """Fit a sparse autoencoder to rows ``activations`` (N, D) (module docstring), in their dtype.

    Initialisation (SAELens / Conerly et al.): decoder rows uniform on the unit sphere, W_enc = W_dec^T, b_enc = 0,
    b_dec = mean row. Each step draws ``batch_size`` rows with replacement, takes one Adam step on
    mean_rows(||x - x_hat||^2 + l1 ||f||_1) and renormalises the decoder rows. ``settings.resamples`` times in the
    first half of training (at steps j/(2 resamples) of the way, j = 1..resamples) the dead features are resampled
    (``_resample_dead``): without it a code can be left with no feature (seen on one seed in ten at k = 4)."""
    activations = check_float_tensor(activations, "activations", 2, "(N, D)")
    if not isinstance(settings, DictionarySettings):
        raise InvalidInputType(f"settings must be a DictionarySettings, got {type(settings).__name__}")
    if activations.shape[0] > MAX_ROWS:
        raise InvalidInput(f"activations must have at most {MAX_ROWS:,} rows, got {activations.shape[0]:,}")
    dtype = activations.dtype
    rows, width, features = activations.shape[0], activations.shape[1], settings.n_features
    # the scaled copy of the rows, a batch's activations (with their gradients and the ReLU mask: ~4 copies), and a
    # resampling's (R, F) activations
    check_memory("fit_dictionary", [
        MemoryNeed("the scaled rows", {"rows": rows, "D": width}, rows * width * activations.element_size()),
        MemoryNeed("a batch's feature activations", {"batch_size": settings.batch_size, "n_features": features},
                   4 * settings.batch_size * features * activations.element_size()),
        MemoryNeed("a resampling's feature activations", {"rows": min(rows, RESAMPLE_ROWS), "n_features": features},
                   2 * min(rows, RESAMPLE_ROWS) * features * activations.element_size()),
    ])
    scale = _input_scale(activations)
    x_all = (activations.detach() / scale).contiguous()  # (N, D)
    start = random_dictionary(x_all.shape[1], settings.n_features, settings.seed, dtype)
    w_enc = start.w_enc.clone().requires_grad_(True)  # (D, F)
    b_enc = start.b_enc.clone().requires_grad_(True)  # (F,)
    w_dec = start.w_dec.clone().requires_grad_(True)  # (F, D)
    learned = settings.centre == "learned"
    b_dec = x_all.mean(dim=0).clone().requires_grad_(learned)  # (D,)
    optimiser = torch.optim.Adam([w_enc, b_enc, w_dec] + ([b_dec] if learned else []), lr=settings.lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimiser, lambda step: 1.0 - step / settings.steps)
    generator = torch.Generator().manual_seed(settings.seed + 1)
    resample_at = {round(settings.steps * j / (2 * settings.resamples)) for j in range(1, settings.resamples + 1)}
    for step in range(settings.steps):
        if step in resample_at and step > 0:
            _resample_dead(x_all, w_enc, b_enc, w_dec, b_dec, optimiser, generator)
        batch = x_all[torch.randint(rows, (settings.batch_size,), generator=generator)]  # (B, D)
        f = torch.relu((batch - b_dec) @ w_enc + b_enc)  # (B, F)
        x_hat = f @ w_dec + b_dec  # (B, D)
        loss = ((batch - x_hat) ** 2).sum(dim=1).mean() + settings.l1 * f.sum(dim=1).mean()
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        schedule.step()
        with torch.no_grad():
            w_dec /= w_dec.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return SparseDictionary(w_enc=w_enc.detach(), b_enc=b_enc.detach(), w_dec=w_dec.detach(), b_dec=b_dec.detach(),
                            scale=scale)


# ----- scoring -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FeatureMatch:
    """For each known direction j: ``best_cosines[j]`` = max_i cos(feature i, direction j) (signed, or |cos| where
    not ``signed``), ``matched_features[j]`` = the argmax i (lowest index on ties); ``mean_best_cosine`` their mean."""

    best_cosines: tuple[float, ...]
    matched_features: tuple[int, ...]
    mean_best_cosine: float
    signed: bool


def feature_matching(dictionary_features: Tensor, true_directions: Tensor, signed: bool = True) -> FeatureMatch:
    """Match every true direction (m, D) to its best dictionary feature (F, D) by cosine (rows need not be unit)."""
    features = check_float_tensor(dictionary_features, "dictionary_features", 2, "(n_features, D)")
    truth = check_float_tensor(true_directions, "true_directions", 2, "(m, D)")
    if features.shape[1] != truth.shape[1]:
        raise InvalidInput(f"true_directions have D={truth.shape[1]} but dictionary_features have "
                           f"D={features.shape[1]}")
    if not isinstance(signed, bool):
        raise InvalidInputType(f"signed must be a bool, got {type(signed).__name__}")
    for name, rows in (("dictionary_features", features), ("true_directions", truth)):
        if bool((rows.norm(dim=1) == 0).any()):
            raise InvalidInput(f"{name} has an all-zero row, which has no direction")
    features = features.double() / features.double().norm(dim=1, keepdim=True)  # (F, D)
    truth = truth.double() / truth.double().norm(dim=1, keepdim=True)  # (m, D)
    cosines = truth @ features.T  # (m, F)
    if not signed:
        cosines = cosines.abs()
    best, matched = cosines.max(dim=1)  # (m,), (m,)
    return FeatureMatch(best_cosines=tuple(best.tolist()), matched_features=tuple(matched.tolist()),
                        mean_best_cosine=float(best.mean()), signed=signed)


@dataclass(frozen=True)
class DictionaryScore:
    """A dictionary on rows x: ``match``, the known directions matched to the *live* features (those active on at
    least one row; a dead feature keeps its random initial direction and would match arbitrary directions by chance),
    with feature indices into the whole dictionary; the reconstruction ``r2`` = 1 - sum||x - x_hat||^2 /
    sum||x - mean x||^2; ``mean_l0``, the active features per row; ``dead``, the features active on no row."""

    match: FeatureMatch
    r2: float
    mean_l0: float
    dead: int

    @property
    def best_cosines(self) -> tuple[float, ...]:
        return self.match.best_cosines

    @property
    def matched_features(self) -> tuple[int, ...]:
        return self.match.matched_features

    @property
    def mean_best_cosine(self) -> float:
        return self.match.mean_best_cosine


@torch.no_grad()
def score_dictionary(dictionary: SparseDictionary, activations: Tensor, true_directions: Tensor,
                     signed: bool = True) -> DictionaryScore:
    """Score ``dictionary`` on rows ``activations`` (N, D) against ``true_directions`` (m, D). With no live feature
    every best cosine is NaN and every matched index -1."""
    if not isinstance(dictionary, SparseDictionary):
        raise InvalidInputType(f"dictionary must be a SparseDictionary, got {type(dictionary).__name__}")
    x = dictionary._rows(activations, "activations").double()  # (N, D)
    f = dictionary.encode(x.to(dictionary.w_enc))  # (N, F)
    active = f > 0  # (N, F)
    alive = active.any(dim=0)  # (F,)
    live = torch.nonzero(alive).flatten()  # (F_live,)
    if live.numel() > 0:
        match = feature_matching(dictionary.features[live], true_directions, signed)
        match = FeatureMatch(best_cosines=match.best_cosines,
                             matched_features=tuple(int(live[i]) for i in match.matched_features),
                             mean_best_cosine=match.mean_best_cosine, signed=signed)
    else:
        m = feature_matching(dictionary.features, true_directions, signed).best_cosines  # checks the directions
        match = FeatureMatch(best_cosines=(math.nan,) * len(m), matched_features=(-1,) * len(m),
                             mean_best_cosine=math.nan, signed=signed)
    x_hat = dictionary.decode(f).double()  # (N, D)
    total = float(((x - x.mean(dim=0)) ** 2).sum())
    residual = float(((x - x_hat) ** 2).sum())
    r2 = 1.0 - residual / total if total > 0 else (1.0 if residual == 0 else -math.inf)
    return DictionaryScore(match=match, r2=r2, mean_l0=float(active.sum(dim=1).double().mean()),
                           dead=int((~alive).sum()))


def stream_dictionary(model: KMeansTransformer, points: Tensor, centroids: Tensor,
                      settings: DictionarySettings = DictionarySettings(), hook: str = POINTS_HOOK,
                      steps: int | None = None, slots: str = "scratch",
                      centred: bool = True) -> tuple[SparseDictionary, DictionaryScore]:
    """Fit a dictionary on ``hook``'s rows (``stream_activations``, by default the code slots of the points stream
    after step 0) and score it against ``known_directions(model, centred)`` on the same rows."""
    directions = known_directions(model, centred)  # (m, D)
    activations = stream_activations(model, points, centroids, hook, steps, slots)  # (N, D)
    dictionary = fit_dictionary(activations, settings)
    return dictionary, score_dictionary(dictionary, activations, directions)
