"""Section ``causal_abstraction`` of analyses/RESULTS.md in words: every figure looked up in the committed record."""

import json

from analyses.framework import reading as R
from analyses.framework.reading import num, span


def reading() -> str:
    record = json.loads((R.HERE / "results" / "causal_abstraction.json").read_text())
    models = record["models"].values()

    def figures(alignment: str) -> str:
        return span([model[alignment]["label_iia"] for model in models])

    ceiling = record["predictions"]["predictions"]["none"]["value"]
    verdicts = " / ".join(sorted({found["none"]["verdict"] for found in record["verdicts"].values()}))
    return (
        f"Reading: one learned step leaves {figures('none')} of the base points with the label Lloyd's step gives "
        "them (no intervention), so that is the most any alignment could score here (the prediction that it would "
        f"be at least {num(ceiling, 1)}: {verdicts}). Swapping the scratch slots from another task (the construction's "
        f"alignment) moves the output to Lloyd's counterfactual for {figures('known')} of the points, a random "
        f"subspace of the same width for {figures('random')} (chance: one point in k), the subspace DAS learned for "
        f"{figures('das')}, about half of it inside the slots ({span([m['das_overlap_with_scratch'] for m in models])}"
        "). So at this search budget no subspace of the codes' width was found through which the model uses Lloyd's "
        "assignment the way the algorithm does; the linear probe's accuracy (the instruments table) measures what can "
        "be read from the stream, these figures what an interchange intervention changes. Whether a wider subspace, "
        "another site (attn_xc's output, which the probe reads best) or a longer search does better is not tested "
        "here.\n")


READINGS = {"causal_abstraction": reading}
