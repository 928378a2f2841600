"""Embedding width at d = 8, k = 8: one-hot (D = 16) vs binary (D = 11) vs none (D = 8), paper 2 §3.

Made from ``analyses/studies/_template``: a cell between the committed ones (d = 4 and 32; k = 6 and 16), decided by
the same three claims as every embedding cell (``claims.py``).
Run: python -m analyses run embedding_d8_k8 --budget quick   (minutes; --budget paper: the papers' 10,000 steps)
"""

from analyses.framework.grid import GridStudy

STUDY = GridStudy(
    title="Embedding width at d = 8, k = 8, n = 128: one-hot (D = 16) vs binary vs none (D = 8)",
    base={"d": 8, "k": 8, "n": 128},  # fixed TrainConfig fields
    grid={"embedding": ["onehot", "binary", "none"]},  # TrainConfig field -> values; one run per value and seed
    paper="paper 2 Figs. 2, 6, 10, 14 (n = 512, 10,000 steps, 10 seeds; onehot, binary < Lloyd < none)",
    claims="embedding",  # the study of analyses.claims whose claims decide it
    claim_prefix="embedding.d8k8.",  # only these claims of that study: this cell's
)
