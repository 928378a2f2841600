"""The readings several study folders share: an embedding cell's (one-hot, binary, d-only at one (d, k)),
a grid over one field, the stability cells' counts of unstable, jumping and stalled seeds."""

from __future__ import annotations

import math

from analyses import _studies as S
from analyses import claims as C
from analyses.framework import reading as R
from analyses.framework.reading import figure, num, sci, signed, span
from interp.model.config import EMBEDDINGS

D4K16_CLAIMS = {"onehot_binary_beat_one_step_lloyd": "one-hot and binary beat one-step Lloyd",
                "twenty_step_order": "after 20 steps one-hot, binary < Lloyd < none",
                "none_never_matches": "none never matches one-step Lloyd"}


def verdict_list(outcomes: dict[str, str]) -> str:
    """'"<claim in words>" <verdict>; ...' of an embedding cell's claims' ``outcomes`` (claim -> verdict)."""
    return "; ".join(f"\"{D4K16_CLAIMS[claim]}\" {outcome}" for claim, outcome in outcomes.items())


def study_if_stored(name: str) -> R.Study | None:
    """The study ``name``, or None before its first rows are scored (no ``_training.json`` yet)."""
    return R.study(name) if S.training_path(R.STUDIES, name).exists() else None


def stalled(s: R.Study) -> str:
    """The seeds whose relative validation objective fell by less than STALL_GAIN after step STALL_FROM, with their
    values there and at the end and the learning rate the plateau schedule left them (from the training curves);
    empty when there are none."""
    found = []
    for label, rows in s.groups.items():
        for row in rows:
            curve = {entry["step"]: entry for entry in s.evidence.history(row)}
            if STALL_FROM not in curve or row["status"] != "ok":
                continue
            start, end = curve[STALL_FROM]["relative_objective"], curve[max(curve)]
            if start - end["relative_objective"] < STALL_GAIN * start:
                first_lr = curve[min(curve)]["lr"]
                found.append(f"{label.removeprefix('embedding=')} seed {row['seed']}: {num(start)} at step "
                             f"{STALL_FROM:,}, {num(end['relative_objective'])} at the end, learning rate "
                             f"{sci(end['lr'])} at the end ({figure(f'{first_lr:g}')} halved "
                             f"{round(math.log2(first_lr / end['lr']))} times by the plateau schedule)")
    if not found:
        return ""
    return (f" Seeds that stalled (less than {100 * STALL_GAIN:.0f}% lower at the end than at step {STALL_FROM:,}, "
            "a description of the curves, not a registered claim): " + "; ".join(found) + ". Why they stall is not "
            "tested here.")


def jump_of(s: R.Study, row: dict) -> tuple[float, float, float, float] | None:
    """``claims.largest_jump_at`` of a seed that ended cleanly and whose finite relative validation objective rose
    more than claims.SPIKE above its best so far; None for any other seed."""
    found = C.largest_jump_at(s.evidence, row)
    return found if row["status"] == "ok" and C.SPIKE < found[0] < math.inf else None


def jumps(s: R.Study) -> str:
    """The ``jump_of`` seeds: where the largest rise was logged, from what to what, and the value at the end (from
    the training curves); empty when there are none."""
    found = []
    for label, rows in s.groups.items():
        for row in rows:
            if (jumped := jump_of(s, row)) is not None:
                jump, step, best, value = jumped
                end = s.evidence.history(row)[-1]
                found.append(f"{label.removeprefix('embedding=')} seed {row['seed']}: from {num(best)}, its best so "
                             f"far, to {num(value)} at step {step:,.0f} (+{100 * jump:.0f}%), "
                             f"{num(end['relative_objective'])} at the end")
    if not found:
        return ""
    return (f" Seeds whose objective rose more than {100 * C.SPIKE:.0f}% above its best so far, with every value "
            "finite (a description of the curves, not counted by the registered rule): " + "; ".join(found) + ".")


def unstable_counts(s: R.Study) -> dict[str, tuple[int, int, int]]:
    """embedding -> (seeds, numerically unstable seeds (status not ok: the claims' count), the other seeds whose
    validation objective rose more than claims.SPIKE above its best so far: ``jump_of``) of a stability study's
    embeddings."""
    out = {}
    for embedding in ("onehot", "binary"):
        if f"embedding={embedding}" in s.groups:
            rows = s.groups[f"embedding={embedding}"]
            clean = [row for row in rows if row["status"] == "ok"]
            out[embedding] = (len(rows), len(rows) - len(clean),
                              sum(jump_of(s, row) is not None for row in clean))
    return out


def embedding_pair(name: str) -> str:
    s = R.study(name)
    onehot, binary, none = (s.label(embedding=e) for e in ("onehot", "binary", "none"))
    d, k = s.config("d"), s.config("k")
    text = (f"Reading (d = {d}, k = {k}, {s.steps()} steps, {s.seeds()} seeds): one-hot "
            f"{num(s.median(onehot))}, binary {num(s.median(binary))} and d-only {num(s.median(none))} of one-step "
            f"Lloyd (d-only's best seed ends at {num(s.best(none))}); {s.below(onehot)} of {s.seeds(onehot)} one-hot "
            f"and {s.below(binary)} of {s.seeds(binary)} binary seeds are below 1. After 20 re-embedded steps the gap "
            f"to Lloyd is one-hot {signed(s.median(onehot, 'gap20'))}, binary {signed(s.median(binary, 'gap20'))}, "
            f"d-only {signed(s.median(none, 'gap20'))}. The smoothed loss's gap after one step is "
            f"{num(s.median(onehot, 'loss'), 2)} for one-hot")
    if name == "embedding_d4_k6":
        return text + (". Why the d-only model falls short is not tested at this size; on the main d = 32, k = 10 "
                       "d-only model an intervention that makes the centroids compete for the points was tested "
                       "(`explain`, section 5, case none).\n")
    other = R.study("embedding_d4_k6")
    text += f" against {num(other.median(other.label(embedding='onehot'), 'loss'), 2)} at d = 4, k = 6"
    if name == "embedding_d4_k16":
        n = s.config("n")
        here = {claim: s.outcome(f"embedding.d4k16.{claim}") for claim in D4K16_CLAIMS}
        text += (f" (`embedding_d4_k6`). By the registered rules: {verdict_list(here)}. With n = {n} a task has "
                 f"{n // k} points per cluster against the papers' {C.PAPER_N // k}")
        paper = study_if_stored("embedding_d4_k16_n512")
        if paper is None or not paper.complete(EMBEDDINGS):
            return text + "; the same claims at n = 512 wait for their seeds (`embedding_d4_k16_n512`).\n"
        there = {claim: paper.outcome(f"embedding_n512.d4k16.{claim}") for claim in D4K16_CLAIMS}
        same = "each claim gets the same verdict" if here == there else f"the verdicts are: {verdict_list(there)}"
        return text + f"; trained at the papers' n = {C.PAPER_N} (`embedding_d4_k16_n512`), {same}.\n"
    if name == "embedding_d8_k8":
        here = {claim: s.outcome(f"embedding.d8k8.{claim}") for claim in D4K16_CLAIMS}
        return text + (f" (`embedding_d4_k6`). By the registered rules: {verdict_list(here)}. This cell was added "
                       "through the study template (analyses/studies/embedding_d8_k8/) with the three rules of every "
                       "embedding cell, unchanged; its (8, 8) instance was written before its runs started and "
                       "committed while they trained, so these verdicts are not predictions in the strict sense of "
                       "the other cells'.\n")
    return text + " (`embedding_d4_k6`).\n"


def grid(name: str, field: str) -> str:
    s = R.study(name)
    labels = list(s.groups)
    values = [label.split("=", 1)[1] for label in labels]
    rels, gaps = [s.median(x) for x in labels], [s.median(x, "gap20") for x in labels]
    losses = [s.median(x, "loss") for x in labels]
    fixed = "k" if field == "d" else "d"
    text = (f"Reading ({fixed} = {s.config(fixed)}, {s.steps()} steps, {s.seeds()} seeds): the step's relative "
            f"objective is {span(rels)} of one-step Lloyd over {field} in {{{', '.join(values)}}}, and after 20 steps "
            f"the gap to Lloyd is " + ", ".join(f"{signed(g)} at {field} = {v}" for g, v in zip(gaps, values)) + ". "
            "The smoothed loss's gap after one step is " + ", ".join(f"{num(x, 2)}" for x in losses) +
            " (same order).")
    if field == "k":
        last = labels[-1]
        text += (f" At {last.replace('=', ' = ')} the seeds spread most (upper quartile "
                 f"{num(s.quartile(last, 'rel', 0.75))} against the median {num(s.median(last))}), the split "
                 "`stability_d32_k25` shows over ten seeds. These advantages are measured from random initial "
                 "centroids; from farthest-first starts the main models end above Lloyd (`explain`, section 5, case "
                 "gonzalez).")
    return text + "\n"


STALL_FROM, STALL_GAIN = 1000, 0.05  # a seed stalled: less than 5% lower at the end than at step 1,000
