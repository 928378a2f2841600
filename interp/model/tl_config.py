"""``KMeansTransformer.cfg``: the configuration fields TransformerLens code reads, derived from ``ModelConfig``.

TransformerLens's ``ActivationCache`` reads ``model.cfg.n_layers`` (negative layer indices, the default ``layer`` of
``stack_activation``, ``accumulated_resid`` and ``decompose_resid``), ``attn_only``, ``n_heads``, ``d_model``,
``d_mlp``, ``normalization_type`` and ``final_rms``; its patching helpers read ``device``. ``TLConfig`` holds those,
with this model's meaning:

* ``n_layers``: the steps a call without ``steps`` runs (``inference.steps``, else ``ModelConfig.n_layers``); each
  has a block, so ``blocks.0 ... blocks.{n_layers - 1}`` exist between calls. A cache carries the steps of its own
  run (``KMeansActivationCache.cfg``), so one shared layer run for T steps gives T.
* ``n_heads`` = 1 and ``d_head`` = ``d_model`` = D: each of a block's four attentions is one head of full width
  (paper 2, Eq. 4), so ``attn_xc.QK`` and ``attn_xc.OV`` are (1, D, D), TransformerLens's (n_heads, d_model, d_model).
* ``attn_only``: no FFN (``ModelConfig.ffn``); ``d_mlp`` the FFN's hidden width H, else None.
* ``normalization_type`` None and ``final_rms`` False: no layer norm (an attention's ``output_norm="unit"`` rescales
  its own output, inside ``hook_out``); ``positional_embedding_type`` "none": tokens carry no positions, the model
  is equivariant to the order of the points.
* ``device`` and ``dtype``: where the model's tensors are now.

The fields beyond TransformerLens's name this model's own structure: ``n_weight_sets`` (1 for shared weights, else
``n_layers`` of ``ModelConfig``), ``d`` and ``k``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from interp.model.config import ModelConfig


@dataclass(frozen=True)
class TLConfig:
    """What TransformerLens reads from ``model.cfg`` (module docstring), for one k-means transformer."""

    n_layers: int  # steps of a default call (or, on a cache, of its run)
    d_model: int  # D = d + e (+ 1 with a norm slot)
    n_heads: int  # 1: each attention is one head
    d_head: int  # D: the head is the whole width
    d_mlp: int | None  # the FFN's hidden width H, None without FFNs
    attn_only: bool  # no FFNs
    normalization_type: str | None  # None: no layer norm
    final_rms: bool  # False: no final norm
    positional_embedding_type: str  # "none": no positions
    device: str  # e.g. "cpu", "cuda:0"
    dtype: torch.dtype  # the model's floating dtype
    n_weight_sets: int  # 1 (shared weights) or ModelConfig.n_layers
    d: int  # data dimensions
    k: int  # centroids

    @classmethod
    def of(cls, config: ModelConfig, steps: int, device: torch.device, dtype: torch.dtype) -> "TLConfig":
        """The ``TLConfig`` of a model of ``config`` whose default call runs ``steps`` steps, on ``device`` in
        ``dtype``."""
        return cls(
            n_layers=steps, d_model=config.d_model, n_heads=1, d_head=config.d_model,
            d_mlp=config.hidden_width if config.ffn else None, attn_only=not config.ffn,
            normalization_type=None, final_rms=False, positional_embedding_type="none",
            device=str(device), dtype=dtype,
            n_weight_sets=1 if config.shared_weights else config.n_layers, d=config.d, k=config.k,
        )
