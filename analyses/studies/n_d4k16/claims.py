"""The claim of study ``n_d4k16``: at d = 4, k = 16 (one-hot) the training length n, 128 against the papers' 512, has
no effect (the equivalence rule of study ``n``, ``C.no_effect_claim``; docs/claims.md). Its rows are the one-hot rows
of embedding_d4_k16 and embedding_d4_k16_n512."""

from analyses import claims as C

CELLS = [(f"d=4,k=16 onehot n={n}", {"d": 4, "k": 16, "embedding": "onehot", "n": n}) for n in (128, 512)]

CLAIMS = (C.no_effect_claim("n_d4k16.no_effect", "n_d4k16", CELLS,
                            "At d = 4, k = 16 (one-hot) the training length n (128 vs the papers' 512) has no effect"),)

# The design of the study these claims decide (docs/claims.md): its grid, the tables its claims read, the seeds a cell
# needs.
DESIGNS = (
    C.StudyDesign("n_d4k16", "Training length n at d = 4, k = 16, where one-hot misses one-step Lloyd at n = 128",
                  "d = 4, k = 16, one-hot; n in {128, 512}; 10,000 steps, 5 seeds; the rows are the one-hot rows of "
                  "embedding (n = 128) and embedding_n512 (n = 512), not runs of their own",
                  ("embedding_d4_k16", "embedding_d4_k16_n512")),
)
