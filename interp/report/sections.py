"""The report's explanation sections (the decomposition, the crowded pair, the distilled algorithm), its circuit,
sparse-dictionary and interchange-intervention sections, and its opening findings, each generated from the figures
the report computed."""

from __future__ import annotations

import html
import math

from interp.instruments.dictionary import DictionaryScore
from interp.instruments.probes import ProbeResult
from interp.instruments.symmetry import CrowdedPair
from interp.model import KMeansTransformer
from interp.report import plots
from interp.report.abstraction import AbstractionFigures
from interp.report.circuits import CircuitFigures
from interp.report.explanation import Explanation, ExplanationSettings, pair_of_report
from interp.report.page import Report, number, params_text, table


def decomposition_section(report: Report, explanation: Explanation) -> None:
    """The report's "Decomposition of the update" section: parts by path and the symmetric / slot-specific split."""
    settings = explanation.settings
    report.heading("Decomposition of the update",
                   "The centroid update Δc = c' − c of one step split exactly into what flows through attn_cc and "
                   "through attn_cx from each source of the point stream (raw points, what attn_xc wrote, what "
                   "attn_xx wrote, the value bias), each attention's pattern held at its value "
                   "(interp.instruments.decompose); then the update's slot-symmetric part (the output averaged over "
                   "slot permutations, mapped back) and the slot-specific rest (interp.instruments.symmetry). "
                   f"Sizes: {html.escape(settings.describe())}; "
                   f"{_seconds(explanation, 'decomposition', 'symmetric split')}.")
    rows = []
    for row in explanation.paths:
        entry = {"path": row.name, "share of Var(update)": row.variance_share, "Var(part) / Var(update)":
                 row.own_variance, "cosine with Lloyd's update": row.cosine_lloyd}
        if explanation.path_shares:
            entry["share of the symmetric part"] = explanation.path_shares[row.name]["symmetric"]
            entry["share of the slot-specific part"] = explanation.path_shares[row.name]["specific"]
        rows.append(entry)
    report.html(table(rows))
    report.html(f"<p>The parts sum to the update within {explanation.sum_error:.1e} (max |sum of parts − update|); "
                "the shares sum to 1.</p>")
    if explanation.equivariant:
        report.html(f"<p><b>Exactly slot-equivariant:</b> {html.escape(explanation.equivariant)}, so permuting the "
                    "initial centroids permutes the output (checked: reversing the slot order changes the mapped-back "
                    f"output by at most {explanation.reversed_max_change:.1e}); the update is its own symmetric part "
                    "and there is no slot-specific part to split.</p>")
    else:
        report.html(table([{"permutations": explanation.n_permutations,
                             "R2 of the update by its symmetric part": explanation.r2_symmetric,
                             "symmetric share": explanation.symmetric_share,
                             "slot-specific share": explanation.specific_share,
                             "Monte Carlo error": explanation.monte_carlo_error,
                             "mean |output change| under a slot permutation": explanation.permutation_change,
                             "max |output change|, slot order reversed": explanation.reversed_max_change,
                             "mean |update|": explanation.mean_abs_update}]))
        report.html(f"<p>Shares of the slot-specific part by path on the first {settings.path_tasks} tasks (the "
                    "same permutations).</p>")
    report.figure(plots.decomposition_figure(explanation.paths, explanation.path_shares or None))


def crowded_pair_sentences(pair: CrowdedPair | None, tasks: int, equivariant: str | None = None) -> str:
    """One or two sentences (HTML) on the crowded pair, generated from its measured numbers: how much of each move is
    slot-specific, which slot takes the shared points and whether the swap swaps the roles (the cosines); for a model
    without a slot-specific part (``equivariant``: why, if known), its measured size."""
    if pair is None:
        return (f"<p>No two initial centroids of the {tasks} tasks start in one true component: there is no crowded "
                "pair to show.</p>")
    i, j = pair.slots
    where = (f"task {pair.task} of the {tasks} tasks, slots {i} and {j}, {pair.distance:.2f} apart in true component "
             f"{pair.component}")
    if pair.at_rounding_level:
        reason = f" {html.escape(equivariant)}." if equivariant else ""
        return (f"<p><b>No slot-specific part:</b>{reason} Measured on the crowded pair ({where}): the slot-specific "
                f"parts are at most {float(pair.specific_fraction.max()):.1e} of the moves' length and swapping the "
                f"two slots changes the moves by at most {pair.swap_change:.1e}, rounding level; the two panels show "
                "the same moves.</p>")
    first, second = (float(value) for value in pair.specific_fraction)
    before, after = (float(value) for value in pair.slot_share)
    cosines = [float(value) for value in pair.swap_cosine]
    if min(cosines) > 0.5:
        verdict = "swaps the roles"
    elif max(cosines) < 0.5:
        verdict = "does not swap the roles here"
    else:
        verdict = "swaps the roles only in part"
    return (f"<p>On the crowded pair ({where}) the slot-specific part is {number(first, 2)} of the move of A "
            f"(slot {i}) and {number(second, 2)} of B's (slot {j}); slot {i} gets {number(before, 2)} of the pair's "
            f"attn_xc weight on the component's points. Swapping the two slots {verdict}: each centroid's "
            f"slot-specific part then has cosine {number(cosines[0], 2)} (A) and {number(cosines[1], 2)} (B) with "
            f"the other's before the swap ({number(pair.taken_over, 2)} of each other's slot-specific part taken "
            f"over), and slot {i}, now holding B, gets {number(after, 2)} of the weight.</p>")


def crowded_pair_section(report: Report, model: KMeansTransformer, settings: ExplanationSettings,
                         equivariant: str | None = None) -> CrowdedPair | None:
    """The report's "The slot-specific part on one crowded pair" section: the sentences of ``crowded_pair_sentences``
    and ``plots.crowded_pair_figure``; returns the pair."""
    pair, seconds = pair_of_report(model, settings)
    error = (f" (standard error of the symmetric moves from sampling the orders: "
             f"{float(pair.monte_carlo_error.max()):.2g}, in the units of the points)"
             if pair is not None and not pair.exhaustive else "")
    report.heading("The slot-specific part on one crowded pair",
                   "In a learned model with slot codes the one-step update depends most on the slot order where two "
                   "initial centroids start in one true component (analyses/RESULTS.md, &quot;The slot-specific "
                   "part, explained by interventions&quot;). The pair shown: over the tasks above, the two centroids "
                   "closest to each other whose nearest true component mean is the same "
                   "(interp.instruments.symmetry.crowded_pair); its moves with the slots as given and with the two "
                   "slots swapped (mapped back), attn_xc's weights of the component's points, and the symmetric "
                   f"part over {pair.n_permutations if pair else settings.pair_permutations} slot orders{error}; "
                   f"computed in {seconds:.1f} s.")
    report.html(crowded_pair_sentences(pair, settings.tasks, equivariant))
    if pair is not None:
        report.figure(plots.crowded_pair_figure(pair))
    return pair


def distilled_section(report: Report, explanation: Explanation) -> None:
    """The report's "Distilled algorithm" section: every family x kernel fitted to the symmetric part, the best one's
    parameters and R^2, and the objectives after the steps."""
    settings, best = explanation.settings, explanation.best
    report.heading("Distilled algorithm",
                   "A soft assignment at one inverse temperature β (kernel: −‖x − c‖², or attn_xc's own data score), "
                   "a move λ to the soft cluster mean and a repulsion κ between centroids (interp.instruments.distill)"
                   f", fitted to the symmetric part of the update on {settings.fit_tasks} tasks and scored on the "
                   f"{settings.tasks} tasks above; "
                   f"{_seconds(explanation, 'distilled algorithm', '20-step objectives')}.")
    report.html(table([{"family": row["family"], "kernel": row["kernel"], "parameters": params_text(row["parameters"]),
                         "R2 fit": row["r2_fit"], "R2 symmetric part (held out)": row["r2_symmetric"],
                         "R2 raw update (held out)": row["r2_update"]} for row in explanation.fits]))
    report.html(f"<p><b>Best:</b> {html.escape(best['family'])} with the {html.escape(best['kernel'])} kernel, "
                f"{html.escape(params_text(best['parameters']))}: R² {number(best['r2_symmetric'])} of the symmetric "
                f"part, {number(best['r2_update'])} of the raw update.</p>")
    report.html(table([{"method": method, f"mean log objective after {settings.steps} steps": value}
                        for method, value in explanation.objectives.items()]))
    report.figure(plots.distilled_figure(explanation.fits, explanation.objectives))


def circuits_section(report: Report, figures: CircuitFigures) -> None:
    """The report's "Circuits" section: the largest exact edge-patching effects, ACDC's circuit and node attribution
    patching against exact node patching (``interp.report.circuits``), or why the model has no graph."""
    settings = figures.settings
    corruption = {"tasks": "the model run on the next task's points and initial centroids",
                  "starts": "the model run on the same points from other random initial centroids",
                  "shuffled_points": "the model run on each task's points in another order",
                  "mean": "each node's mean over the tasks and tokens of the clean run (mean ablation)"}
    report.heading("Circuits: edge patching, ACDC and attribution patching (one step)",
                   "The step as a graph (interp.instruments.graph, docs/circuits.md): nodes are the embeddings and "
                   "the four attentions, an edge is a node feeding an attention's query, key or value or the output. "
                   "<b>Patching an edge</b> gives the input it feeds its node's value from the corrupted run "
                   f"({html.escape(corruption[settings.corruption])}) while every other edge keeps the clean "
                   f"value. Sizes: {html.escape(settings.describe(figures.n))}; computed in "
                   f"{figures.seconds:.1f} s.")
    if figures.unavailable is not None:
        report.html(f"<p><b>No graph for this model:</b> {html.escape(figures.unavailable)}. The circuit figures "
                    "are not computed.</p>")
        return
    effects, circuit, nodes = figures.effects, figures.circuit, figures.nodes
    scale = effects.corrupted_damage
    report.html(f"<p>The {len(figures.top_edges())} edges of {len(effects.edges)} whose patching alone changes the "
                "mean ln Φ of the clean points (k-means objective of the output centroids) the most "
                f"(interp.instruments.circuit_discovery.edge_effects); patching every edge at once (the corrupted "
                f"run) changes it by {number(scale, 4, sign=True)}.</p>")
    report.html(table([{"rank": rank, "edge patched alone": edge, "change of ln Φ": effect,
                        "share of the corrupted run's change": effect / scale if scale else math.nan}
                       for rank, (edge, effect) in enumerate(figures.top_edges(), start=1)]))
    kept = set(circuit.edges)
    removed = [str(edge) for edge in effects.edges if edge not in kept]
    report.html(f"<p><b>ACDC</b> (Conmy et al. 2023, Algorithm 1; interp.instruments.circuit_discovery.acdc): from "
                "the output backwards, each edge is patched and stays patched when |change of ln Φ| grows by less "
                f"than {circuit.threshold:g}. It keeps <b>{len(circuit.edges)} of {circuit.all_edges} edges</b>; "
                f"with the other {circuit.all_edges - len(circuit.edges)} patched together ln Φ changes by "
                f"{number(circuit.damage, 4, sign=True)}, and the circuit <b>recovers "
                f"{number(circuit.recovered, 4)}</b> of the gap between the corrupted run's mean ln Φ and the full "
                "model's ((corrupted − circuit) / (corrupted − full); 1 = as good as the full model). Patched: "
                f"{html.escape(', '.join(removed)) if removed else 'none'}.</p>")
    report.html("<p><b>Attribution patching</b> (interp.instruments.attribution.node_attribution): AtP estimates "
                "patching a node on all the inputs it feeds to first order, (u~ − u) · ∂M/∂u, from one forward and "
                "one backward pass; AtP* recomputes a query or key's attention pattern exactly (Kramár et al. 2024). "
                "Both against the exact effect of that patch, with M = the share of the way from the full model's "
                f"output to the corrupted run's: Pearson r over the {len(nodes.nodes)} nodes "
                f"<b>{number(figures.pearson)}</b> (AtP), {number(figures.pearson_corrected)} (AtP*). Agreement "
                "here is measured on these tasks and this corruption only.</p>")
    report.html(table([{"node patched": str(node), "AtP": float(plain), "AtP*": float(corrected),
                        "exact": float(exact)} for node, plain, corrected, exact
                       in zip(nodes.nodes, nodes.plain, nodes.corrected, nodes.exact)]))
    report.figure(plots.attribution_figure(nodes, figures.pearson, figures.pearson_corrected))


SLOTS_SHOWN = {"scratch": "code (scratch) slots", "all": "whole stream"}


def dictionary_section(report: Report, figures: AbstractionFigures) -> None:
    """The report's "Sparse dictionaries" section: the fitted dictionaries and their untrained controls (R^2, L0,
    dead features and, for a model with codes, the matching to the construction's code directions)."""
    settings = figures.settings
    report.heading("Sparse dictionaries on the points stream (one step)",
                   "A sparse autoencoder (interp.instruments.dictionary, docs/dictionaries.md; Bricken et al. 2023) "
                   f"fitted on the rows of <code>{html.escape(figures.hook)}</code>, the points stream after the "
                   "first step, on the code (scratch) slots alone (the other slots set to 0) and on the whole "
                   "stream; each beside an untrained dictionary of the same width (random_dictionary: unit decoder "
                   "rows uniform on the sphere), the control. R² = the fraction of the rows' variance the "
                   "reconstruction explains; L0 = active features per token; dead = features active on no row. "
                   f"Sizes: {html.escape(settings.describe(figures.n, figures.k))}; computed in "
                   f"{figures.seconds['dictionaries']:.1f} s.")
    with_codes = figures.directions is not None
    rows = []
    for row in figures.dictionaries:
        entry = {"stream": f"{row.model}, {SLOTS_SHOWN[row.slots]}",
                 "dictionary": "fitted" if row.fitted else "untrained (control)", "features": row.n_features,
                 "rows": row.rows, "R2": row.score.r2, "mean L0": row.score.mean_l0, "dead": row.score.dead}
        if with_codes:
            entry["mean best cosine with the codes"] = row.score.mean_best_cosine
            entry["lowest best cosine"] = min(row.score.best_cosines)
        rows.append(entry)
    report.html(table(rows))
    if not with_codes:
        report.html(f"<p><b>No code directions:</b> {html.escape(figures.no_codes)}. The dictionaries' features are "
                    "not matched to anything; the table gives their reconstruction and sparsity only.</p>")
        return

    def find(model: str, slots: str, fitted: bool) -> DictionaryScore:
        return next(row.score for row in figures.dictionaries
                    if (row.model, row.slots, row.fitted) == (model, slots, fitted))

    fitted, control, whole = find("model", "scratch", True), find("model", "scratch", False), find("model", "all", True)
    known = find("construction", "scratch", True)
    report.html(f"<p><b>Feature matching</b>: for each of the {figures.directions.shape[0]} code directions of the "
                "model's construction (code_j − mean code in the scratch slots, "
                "known_directions(reference_construction(model))), the best signed cosine over the dictionary's live "
                "features. On the model's code slots the fitted dictionary reaches a mean best cosine of "
                f"<b>{number(fitted.mean_best_cosine)}</b> (lowest {number(min(fitted.best_cosines))}), the untrained "
                f"control {number(control.mean_best_cosine)}; on the whole stream {number(whole.mean_best_cosine)}. "
                "The same fit on the construction's own code slots (the same tasks, where each step is known to "
                f"write exactly these codes) reaches {number(known.mean_best_cosine)}: the positive control of the "
                "fit's sizes. A dictionary is read, not intervened on: a feature that matches a code direction is "
                "not shown to be used by the model, and one that matches none does not show the model lacks the "
                "code (it may keep it in another basis or elsewhere; a hypothesis).</p>")


RUNS_SHOWN = {
    "known alignment": "the scratch slots d..d+e−1 of the hook copied from the source run (the construction's "
                       "alignment, known_alignment)",
    "random subspace": "a random e-dimensional subspace of the hook taken from the source run, "
                       "h' = h + B Bᵀ(h_source − h) (seeded Haar rotation)",
    "no intervention": "none: source = base, so the copy changes nothing (the model's own step)",
    "known alignment, construction": "the same copy of the scratch slots in the model's construction (γ = ∞), where "
                                     "the assignment is known to live: the positive control",
}


def interchange_section(report: Report, figures: AbstractionFigures) -> None:
    """The report's "Interchange interventions" section: the label IIA of the construction's known alignment of
    Lloyd's assignment against a random subspace of the same width and against no intervention."""
    settings, runs = figures.settings, figures.interchange
    report.heading("Causal abstraction: interchange interventions on Lloyd's assignment (one step)",
                   "The <b>interchange intervention</b> (Geiger et al.; interp.instruments.causal_abstraction, "
                   "docs/causal_abstraction.md) runs the model on a base task with a subspace of "
                   f"<code>{html.escape(figures.hook)}</code> taken from its run on a source task, and compares the "
                   "output with Lloyd's counterfactual: one Lloyd step on the base points with the assignment set "
                   "to the source's (base point i takes the nearest source centroid of source point i). Base = each "
                   f"of the first {figures.pairs} of the tasks above (n = {figures.n}), source = the next of them "
                   "(other points, other initial centroids). <b>Label IIA</b> = the share of base points whose "
                   "nearest output centroid agrees with the counterfactual's (IIAResult.assignment_accuracy); the "
                   f"strict IIA = the share of pairs whose every output coordinate is within {settings.tol:g} of it. "
                   "DAS (a learned subspace) is not run here: too slow for the page. Computed in "
                   f"{figures.seconds['interchange']:.1f} s.")
    report.html(table([{"run": name, "intervention": RUNS_SHOWN[name], "label IIA": result.assignment_accuracy,
                        f"strict IIA (tol {settings.tol:g})": result.accuracy, "pairs scored": result.pairs,
                        "skipped (empty cluster)": result.skipped, "max |output − counterfactual|": result.max_error}
                       for name, result in runs.items()]))
    own = runs["no intervention"]
    if figures.no_codes is not None:
        report.html(f"<p><b>No known alignment:</b> {html.escape(figures.no_codes)}. Without intervention the "
                    f"model's labels agree with Lloyd's step's on <b>{number(own.assignment_accuracy)}</b> of the "
                    "base points.</p>")
        return
    known, random = runs["known alignment"], runs["random subspace"]
    to_random = abs(known.assignment_accuracy - random.assignment_accuracy)
    to_own = abs(known.assignment_accuracy - own.assignment_accuracy)
    closer = "the random subspace's" if to_random < to_own else "the no-intervention figure"
    construction = runs.get("known alignment, construction")
    control = ("" if construction is None else
               " The same copy in the model's construction, where the assignment is known to live, gives label IIA "
               f"{number(construction.assignment_accuracy)} and strict IIA {number(construction.accuracy)} on the "
               "same pairs: the positive control of the intervention and the counterfactual.")
    report.html(f"<p>Copying the code slots from the source run (the known alignment, e = {figures.code_width} "
                f"slots) gives label IIA <b>{number(known.assignment_accuracy)}</b>; interchanging a random "
                f"subspace of the same width gives {number(random.assignment_accuracy)} "
                f"(difference {number(known.assignment_accuracy - random.assignment_accuracy, sign=True)}). Without "
                "intervention the model's own labels agree with Lloyd's step's on "
                f"<b>{number(own.assignment_accuracy)}</b> of the points (strict IIA {number(own.accuracy)}): the "
                "reference, how far the model's step already is from Lloyd's before any intervention. A label IIA "
                "of the known alignment near the no-intervention figure would say that the interchange of the code "
                "slots moves the model's assignment as Lloyd's counterfactual does; near the random subspace's, "
                "that on these pairs the code slots carry no more of it than a random subspace. Here it is closer "
                f"to {closer}. Where else the model keeps its assignment, if anywhere, is a hypothesis this "
                f"section does not test.{control}</p>")


def _seconds(explanation: Explanation, *parts: str) -> str:
    return "computed in " + ", ".join(f"{explanation.seconds[part]:.1f} s ({part})" for part in parts)


def findings(summary: list[dict], probes: list[ProbeResult], explanation: Explanation, n_tasks: int) -> list[str]:
    """The report's opening bullets (HTML), each generated from figures the report computed: the evaluation against
    Lloyd, the assignment probe, the largest path of the update, the slot dependence and the distilled algorithm."""
    bullets = []
    final = {row["init"]: row for row in summary if row["step"] == max(r["step"] for r in summary)}
    for init, row in final.items():
        gap = row["model_median"] - row["lloyd_median"]
        bullets.append(f"<b>Against Lloyd</b> ({init} initial centroids, {n_tasks} tasks, {row['step']} steps): mean "
                       f"log objective {number(row['model_median'])} vs Lloyd's {number(row['lloyd_median'])}, "
                       f"{'better' if gap < 0 else 'worse'} by {number(abs(gap))}.")
    probe = next((p for p in probes if p.hook.endswith("attn_xc.hook_out") and p.target == "assignment"), None)
    if probe is not None:
        bullets.append(f"<b>Assignments:</b> a linear probe reads the nearest centroid from what attn_xc writes with "
                       f"held-out accuracy {number(probe.value)} (input embedding: {number(probe.baseline)}).")
    largest = max(explanation.paths, key=lambda row: abs(row.variance_share))
    bullets.append(f"<b>Update by path:</b> {html.escape(largest.name)} carries {number(largest.variance_share)} of "
                   f"the update's variance (cosine with Lloyd's update {number(largest.cosine_lloyd, 2)}); the parts "
                   f"sum to the update within {explanation.sum_error:.1e}.")
    if explanation.equivariant:
        bullets.append(f"<b>Slot order:</b> exactly slot-equivariant ({html.escape(explanation.equivariant)}; "
                       "reversing the slot order changes the output by at most "
                       f"{explanation.reversed_max_change:.1e}).")
    else:
        top = max(explanation.path_shares.items(), key=lambda item: item[1]["specific"])
        bullets.append(f"<b>Slot order matters:</b> the slot-symmetric part explains R² "
                       f"{number(explanation.r2_symmetric)} of the update; the slot-specific part "
                       f"({number(explanation.specific_share)} of its variance) flows mostly through "
                       f"{html.escape(top[0])} ({number(top[1]['specific'])}). Slot-averaged over "
                       f"{explanation.settings.average_permutations} permutations per step, the model reaches "
                       f"{number(explanation.objectives['slot-averaged model'])} after {explanation.settings.steps} "
                       f"steps vs {number(explanation.objectives['model'])} alone.")
    best = explanation.best
    bullets.append(f"<b>Distilled algorithm:</b> {html.escape(best['family'])} ({html.escape(best['kernel'])} "
                   f"kernel; {html.escape(params_text(best['parameters']))}) explains R² "
                   f"{number(best['r2_symmetric'])} of the symmetric part and {number(best['r2_update'])} of the "
                   f"raw update; after "
                   f"{explanation.settings.steps} steps it reaches {number(best['log_objective'])} (model "
                   f"{number(explanation.objectives['model'])}, Lloyd {number(explanation.objectives['Lloyd'])}).")
    return bullets
