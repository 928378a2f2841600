"""<One line: what the study asks, and the paper's figure or section it tests.>

Copy this folder to analyses/studies/<name>/ (a plain name: the table, section and figure take it), fill in the
fields, and run it: ``python -m analyses plan <name> --budget quick``, then ``run``. Budgets are in
analyses/framework/budgets.py. A measurement instead of a training grid: ``analyses.framework.study.MeasuredStudy``.
"""

from analyses.framework.grid import GridStudy

STUDY = GridStudy(
    title="<Title of the section>",
    base={"d": 8, "k": 8, "n": 128},  # fixed TrainConfig fields (interp/training/config.py)
    grid={"embedding": ["onehot", "binary"]},  # TrainConfig field -> values; one run per value and seed
    paper="<the paper's figure and its budget>",
    claims="embedding",  # a study of analyses.claims (STUDIES) whose claims decide it
    claim_prefix="embedding.<your prefix>.",  # only its claims whose id starts so ("" for all)
)
