"""Instruments that look inside a model: read-outs, probes, weight comparisons, patching and ablation, interventions,
the decomposition of the update by path, slot symmetry, kernels, outliers, surrogates and distilled algorithms.

Every instrument runs the model in the fixed slot order (``slot_order="fixed"``): it studies the step as a function
of its slots, slot j holding centroid j, whatever order a checkpoint recommends for use (``load_model("best")``
shuffles). A shuffled run is a composition of such steps with slot permutations (``interp.instruments.symmetry``).
"""
