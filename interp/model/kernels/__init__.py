"""Fast kernels that replace parts of the reference model when they give the same numbers.

The reference model (``interp.model``: ``KMeansTransformer``, ``Block``, ``Attention``) computes each step as the
papers write it, and is what a hooked step runs. These kernels compute the same step faster where nothing observes
what they skip; ``dispatch`` is the one place that decides when one replaces the reference computation, by one rule
("a step with any forward or backward hook on it runs the reference"), and ``reference_only()`` (or
``INTERP_REFERENCE=1``) switches them all off, ``dispatch.without(name)`` one of them; ``dispatch.trace()`` says which
path each part of a forward took.

* ``training_step``: one block step of the learned model (Euclidean softmax attentions, points stream [x, 0]) as
  an ``autograd.Function`` with a hand-derived backward, its (n x n) products contracted over [x, 1] (training).
* ``labelled``: the exact constructions' points stream carried factored, [x; 0] + code-table row per point, so
  inference never forms the (b, n, D) stream.
* ``per_part``: a step whose attentions each take their own kernel, the points' sum in place outside autograd.
* ``fused``: softmax attention without forming the pattern (a formed-pattern kernel up to 65,536 pairs per task,
  torch's flash kernel above), attention dropout drawn sparsely, with exact gradients (training).
* ``hardmax``: AHAT attention from its exact arg-max sets (a row gather when every set is one key).
* ``folded``: scores up to the per-query constant the normalisers ignore, laid out keys-major with fewer keys than
  queries, the projections folded onto the side with fewer tokens.

Each kernel is tested against the literal model (``interp.model.literal``) and the reference at sizes that take it
(tests/test_literal_model.py, tests/test_fast_paths.py, tests/test_hardmax_fast_path.py,
tests/test_inference_fast_labelled.py, tests/test_dispatch.py, tests/test_training_step_kernel.py).
"""

from interp.model.kernels.dispatch import reference_only

__all__ = ["reference_only"]
