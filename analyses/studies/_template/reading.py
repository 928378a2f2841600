"""<Optional: the study's section of analyses/RESULTS.md in words.> Delete this file if the section needs no reading.

Every figure is looked up in the committed rows (``R.study(name)``: a grid point's seeds and a metric) and formatted
by ``analyses.framework.reading`` (``num``, ``signed``, ``span``): a reading types no figure by hand. A sentence about
a mechanism names the intervention behind it, or calls itself a hypothesis.
"""

from analyses.framework import reading as R
from analyses.framework.reading import num


def reading() -> str:
    s = R.study("<name>")
    onehot, binary = s.label(embedding="onehot"), s.label(embedding="binary")
    return (f"Reading ({s.steps()} steps, {s.seeds()} seeds): one-hot ends at {num(s.median(onehot))} and binary at "
            f"{num(s.median(binary))} of one-step Lloyd's objective (median over seeds).\n")


READINGS = {"<name>": reading}
