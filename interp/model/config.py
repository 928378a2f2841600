"""Frozen configuration of the k-means transformer (docs/constructions.md, docs/learned_model.md)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace

from interp._checks import InvalidInput, InvalidInputType, check_choice, check_positive_int, check_steps
from interp.task_config import NARROW_TASKS

SCORES = ("euclidean", "dot")
NORMALISERS = ("softmax", "linear", "sparsemax", "normmax", "gumbel")
OUTPUT_NORMS = ("none", "unit")
EMBEDDINGS = ("onehot", "binary", "none")
SLOT_ORDERS = ("fixed", "shuffle")  # the centroids' slot order at each embedding (KMeansTransformer.forward)
LEARNED_INPUT_RANGE = (0.0, 1.0)  # the training tasks are min-max scaled to [0, 1]^d (interp.tasks)


def _is_number(value: object) -> bool:
    """An int or float that is not a bool (``True`` is an int in Python, but never a meant gamma or rate)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class AttentionConfig:
    """One attention: scores s = -||Qz - Kz'||^2 (euclidean) or (Qz + b_Q)^T(Kz' + b_K) (dot), divided by
    sqrt(D) when ``scale_by_sqrt_dim``; weights = normaliser(gamma * s) over keys (docs/constructions.md).

    gamma = inf with softmax or sparsemax is the averaging hardmax (AHAT): uniform over the exact arg-max
    set. ``linear`` is normalised linear attention w = s / sum(s) (paper 1's centre update; needs dot scores
    >= 0; an all-zero row becomes uniform, the epsilon -> 0 limit). ``identity`` replaces a self-attention by
    its gamma = inf value on distinct tokens, the identity pattern (the authors' ``osa``).

    Variants (docs/variants.md): ``normmax`` is alpha-normmax (entmax ``normmax_bisect``); alpha = inf is its limit,
    uniform over the top-m keys with m = argmax_m (sum of the top m of gamma*s - 1) / m. ``gumbel`` adds seeded
    Gumbel(0, 1) noise to gamma*s and takes the arg-max (``gumbel_tau`` = 0) or softmax(./gumbel_tau).
    ``output_norm="unit"`` rescales the attention output to unit length (RMSNorm, eps 0, gain 1/sqrt(D)).
    """

    score: str = "euclidean"
    normaliser: str = "softmax"
    gamma: float = 1.0
    scale_by_sqrt_dim: bool = True
    identity: bool = False
    bias: bool = True
    dropout: float = 0.0
    alpha: float = 2.0  # normmax order
    gumbel_tau: float = 0.0  # 0: hard Gumbel-max; > 0: Gumbel-softmax temperature
    output_norm: str = "none"

    def __post_init__(self) -> None:
        for name in ("gamma", "alpha", "gumbel_tau", "dropout"):
            if isinstance(getattr(self, name), bool):
                raise InvalidInputType(f"{name} must be a number, got the bool {getattr(self, name)!r}")
        check_choice(self.score, "score", SCORES)
        check_choice(self.normaliser, "normaliser", NORMALISERS)
        check_choice(self.output_norm, "output_norm", OUTPUT_NORMS)
        if self.normaliser in ("normmax", "gumbel") and math.isinf(self.gamma):
            raise InvalidInput(
                f"normaliser={self.normaliser!r} needs a finite gamma (it sets the trimming / noise level)")
        if not (_is_number(self.alpha) and self.alpha > 1):
            raise InvalidInput(f"alpha must be > 1 (or inf), got {self.alpha!r}")
        if not (_is_number(self.gumbel_tau) and self.gumbel_tau >= 0 and math.isfinite(self.gumbel_tau)):
            raise InvalidInput(f"gumbel_tau must be a finite number >= 0, got {self.gumbel_tau!r}")
        if not (_is_number(self.gamma) and self.gamma > 0 and not math.isnan(self.gamma)):
            raise InvalidInput(f"gamma must be a positive number or inf, got {self.gamma!r}")
        if self.normaliser == "linear" and self.score != "dot":
            raise InvalidInput("normaliser='linear' needs score='dot' (non-negative similarities)")
        if not (_is_number(self.dropout) and 0.0 <= self.dropout < 1.0):
            raise InvalidInput(f"dropout must be in [0, 1), got {self.dropout!r}")

    @property
    def hard(self) -> bool:
        """True for the gamma = inf limit (AHAT)."""
        return math.isinf(self.gamma) and self.normaliser in ("softmax", "sparsemax")


@dataclass(frozen=True)
class ModelConfig:
    """The whole model: widths, embedding, the four attentions, optional ReLU^2 FFNs, depth and weight sharing.

    ``n_layers`` layers are applied in order; with ``shared_weights`` one weight set serves every layer (and
    any number of steps). ``reembed``: every step re-embeds [X; 0] and [C_current; codes] before its layer
    (docs/learned_model.md); otherwise the residual streams flow on (naive stacking).

    ``centre_tasks`` (the translation-invariant constructions): the forward subtracts each task's anchor a
    (``interp.primitives.task_anchor``: 0 for tasks near the origin, an exact subtraction) from points and
    centroids before embedding, so the residual streams hold x - a and c - a (cached as ``hook_anchor``), and adds
    a back to the output centroids. Learned models are not translation invariant and are never centred.

    ``input_range`` (learned models): the interval (low, high) every coordinate of the training tasks lay in,
    (0, 1) for tasks min-max scaled to the unit cube. The forward warns (``OutOfTrainingRange``) when a point or
    centroid coordinate lies more than half that width outside it. ``None``: no training range (constructions).

    ``slot_equivariant`` (one-hot only): every Q, K, V and bias is held in the slot-tied form of
    ``interp.model.tied_weights`` (code -> code a I + b 11^T, equal columns / rows / code biases), so the model is
    exactly equivariant to the order of the centroid slots.
    """

    d: int
    k: int
    embedding: str = "onehot"
    n_layers: int = 1
    shared_weights: bool = True
    reembed: bool = False
    norm_slot: bool = False  # append ||x||^2 / ||c||^2 as one more feature (paper 1, Thm 2.2; docs/constructions.md)
    ffn: bool = False  # residual ReLU^2 FFN after each stream (paper 1, Thm 2.2; docs/constructions.md)
    ffn_hidden: int = 0  # hidden width; 0 means 2 * d
    attn_xc: AttentionConfig = field(default_factory=AttentionConfig)
    attn_xx: AttentionConfig = field(default_factory=AttentionConfig)
    attn_cx: AttentionConfig = field(default_factory=AttentionConfig)
    attn_cc: AttentionConfig = field(default_factory=AttentionConfig)
    centre_tasks: bool = False
    input_range: tuple[float, float] | None = None
    slot_equivariant: bool = False

    def __post_init__(self) -> None:
        check_positive_int(self.d, "d")
        check_positive_int(self.k, "k")
        check_positive_int(self.n_layers, "n_layers")
        check_choice(self.embedding, "embedding", EMBEDDINGS)
        check_positive_int(self.ffn_hidden, "ffn_hidden", minimum=0)
        for name in ("attn_xc", "attn_xx", "attn_cx", "attn_cc"):
            if not isinstance(getattr(self, name), AttentionConfig):
                raise InvalidInputType(f"{name} must be an AttentionConfig")
        for name in ("attn_xc", "attn_cx"):
            if getattr(self, name).identity:
                raise InvalidInput(f"{name} is a cross-attention; identity=True is only for attn_xx and attn_cc")
        if not isinstance(self.slot_equivariant, bool):
            raise InvalidInputType(f"slot_equivariant must be a bool, got {type(self.slot_equivariant).__name__}")
        if self.slot_equivariant and (self.embedding != "onehot" or self.norm_slot):
            raise InvalidInput("slot_equivariant=True needs embedding='onehot' and no norm slot (a binary code is "
                               f"not permuted by a slot permutation), got embedding={self.embedding!r}, "
                               f"norm_slot={self.norm_slot}")
        if not isinstance(self.centre_tasks, bool):
            raise InvalidInputType(f"centre_tasks must be a bool, got {type(self.centre_tasks).__name__}")
        if self.input_range is not None:
            bounds = self.input_range
            if not (isinstance(bounds, (tuple, list)) and len(bounds) == 2 and all(_is_number(v) for v in bounds)
                    and all(math.isfinite(v) for v in bounds) and bounds[0] < bounds[1]):
                raise InvalidInput(f"input_range must be None or two finite numbers (low, high) with low < high, "
                                   f"got {bounds!r}")
            object.__setattr__(self, "input_range", (float(bounds[0]), float(bounds[1])))

    @property
    def scratch_width(self) -> int:
        """Number of assignment-code features e: k (one-hot), ceil(log2 k) (binary, at least 1), 0 (none)."""
        if self.embedding == "onehot":
            return self.k
        if self.embedding == "binary":
            return max(1, math.ceil(math.log2(self.k)))
        return 0

    @property
    def d_model(self) -> int:
        """Embedding width D = d + e (+1 for the norm slot)."""
        return self.d + self.scratch_width + int(self.norm_slot)

    @property
    def hidden_width(self) -> int:
        return self.ffn_hidden or 2 * self.d

    def to_dict(self) -> dict:
        """JSON-ready: nested dicts for the attentions, ``input_range`` as a list (or None)."""
        data = asdict(self)
        if self.input_range is not None:
            data["input_range"] = list(self.input_range)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "ModelConfig":
        """The config of ``to_dict`` (or its JSON). A dict without ``input_range`` predates that field: every such
        file was written by training on tasks in the unit cube, so it gets (0, 1)."""
        data = dict(data)
        data.setdefault("input_range", LEARNED_INPUT_RANGE)
        for name in ("attn_xc", "attn_xx", "attn_cx", "attn_cc"):
            if name in data and isinstance(data[name], dict):
                data[name] = AttentionConfig(**data[name])
        return cls(**data)


@dataclass(frozen=True)
class InferenceSettings:
    """How ``model(points, centroids)`` runs when the call gives no ``steps`` or ``slot_order``: a model's
    recommended use, stored in its checkpoint (metadata ``inference``; ``load_model("best")``).

    ``steps``: clustering steps, 1 to ``MAX_STEPS`` (None: ``n_layers``). ``slot_order``: "fixed" embeds centroid j
    in slot j; "shuffle" embeds the centroids in a fresh random slot order at every embedding and maps the output
    back to the caller's order (``KMeansTransformer.forward``).

    ``lloyd_steps``: Lloyd iterations, 0 to ``MAX_STEPS``, to run after the model's steps where the model is used as
    a clustering algorithm (``interp.hybrid.hybrid``: ``InContextKMeans``, ``interp evaluate``, ``interp compare``).
    ``model(points, centroids)`` itself runs the transformer only and never reads it. A checkpoint written before
    this field existed has none: 0.

    ``narrow_tasks``: how ``interp.hybrid.hybrid`` fills the model's d coordinates from a task of d' < d: "pad"
    (zeros) or "tile" (its coordinates repeated, ``interp.tasks.tile_dimensions``; the centroids read back as the
    mean of each coordinate's copies), the way the model was trained (``TrainConfig.narrow_tasks``)."""

    steps: int | None = None
    slot_order: str = "fixed"
    lloyd_steps: int = 0
    narrow_tasks: str = "pad"

    def __post_init__(self) -> None:
        if self.steps is not None:  # a checkpoint's recommendation: bounded, or its first default call never returns
            check_steps(self.steps, "steps")
        check_choice(self.slot_order, "slot_order", SLOT_ORDERS)
        check_steps(self.lloyd_steps, "lloyd_steps", minimum=0)
        check_choice(self.narrow_tasks, "narrow_tasks", NARROW_TASKS)

    @classmethod
    def from_dict(cls, data: object, source: str) -> "InferenceSettings":
        """The settings of a checkpoint's ``inference`` metadata (a JSON object with ``steps``, ``slot_order`` and/or
        ``lloyd_steps``); ``InvalidInput`` naming ``source`` otherwise."""
        if not isinstance(data, dict) or set(data) - {"steps", "slot_order", "lloyd_steps", "narrow_tasks"}:
            raise InvalidInput(f"{source}: inference must be a JSON object with steps, slot_order, lloyd_steps and/or "
                               f"narrow_tasks, got {str(data)[:80]}")
        try:
            return cls(**data)
        except (InvalidInput, InvalidInputType) as error:
            raise InvalidInput(f"{source}: invalid inference settings (metadata 'inference'): {error}") from None

    def to_dict(self) -> dict:
        """JSON-ready; ``lloyd_steps`` only when it is not 0, so settings without Lloyd steps are written as they were
        before the field existed."""
        data = asdict(self)
        if not self.lloyd_steps:
            del data["lloyd_steps"]
        if self.narrow_tasks == "pad":
            del data["narrow_tasks"]
        return data


def learned_model_config(
    d: int,
    k: int,
    embedding: str = "onehot",
    normaliser: str = "softmax",
    gamma: float = 1.0,
    dropout: float = 0.01,
    bias: bool = True,
    alpha: float = 2.0,
    gumbel_tau: float = 1.0,
    slot_equivariant: bool = False,
    attn_xx_identity: bool = False,
) -> ModelConfig:
    """The learnable one-layer model of the papers (docs/learned_model.md): four independent attentions with D x D
    Q, K, V (+ biases), Euclidean scores -gamma ||Qz - Kz'||^2 / sqrt(D), gamma = 1, attention dropout 0.01,
    re-embedding before every step. Variants (docs/variants.md) swap the normaliser of all four attentions:
    sparsemax, alpha-normmax (``alpha``) or Gumbel-softmax (``gumbel_tau``; noise from torch's global RNG).
    ``input_range`` = (0, 1): the tasks it is trained on lie in the unit cube (it warns outside).
    ``slot_equivariant``: the one-hot model with slot-tied weights (``interp.model.tied_weights``).
    ``attn_xx_identity``: each point attends to itself only, out_i = V z_i + b_V (the same weights, no (n, n)
    pattern)."""
    attention = AttentionConfig(score="euclidean", normaliser=normaliser, gamma=gamma, scale_by_sqrt_dim=True,
                                identity=False, bias=bias, dropout=dropout, alpha=alpha, gumbel_tau=gumbel_tau)
    return ModelConfig(d=d, k=k, embedding=embedding, n_layers=1, shared_weights=True, reembed=True,
                       attn_xc=attention, attn_xx=replace(attention, identity=True) if attn_xx_identity else attention,
                       attn_cx=attention, attn_cc=attention, input_range=LEARNED_INPUT_RANGE,
                       slot_equivariant=slot_equivariant)


# the keywords of ``learned_model_config`` a training run sets (its other fields set the task and the optimiser)
TRAINED_MODEL_FIELDS = ("d", "k", "embedding", "normaliser", "dropout", "bias", "slot_equivariant", "attn_xx_identity")


def trained_model_config(train_config: Mapping[str, object]) -> ModelConfig:
    """The model a training run's config implies: ``learned_model_config`` of its ``TRAINED_MODEL_FIELDS``, those it
    lacks at their defaults (which are ``interp.training.TrainConfig``'s). The model layer reads a saved
    ``train_config`` through this function and knows nothing else of training."""
    return learned_model_config(**{name: train_config[name] for name in TRAINED_MODEL_FIELDS if name in train_config})
