"""Instruments: read-outs, probes, weight comparisons, patching and ablation, surrogates, plots and the report."""
