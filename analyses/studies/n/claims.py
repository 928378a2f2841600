"""The claim of the training-length grid at d = 4, k = 6 (study ``n``, paper 2 §3, App. F; docs/claims.md): no effect
of n, an equivalence claim (``C.no_effect_claim``)."""

from analyses import claims as C

CELLS = [(f"n={n}", {"n": n}) for n in (128, 256, 512, 1024)]

CLAIMS = (C.no_effect_claim("n.no_effect", "n", CELLS, "The training length n has no significant effect",
                            reaches=CELLS[2]),)

# The design of the study these claims decide (docs/claims.md): its grid, the tables its claims read, the seeds a cell
# needs.
DESIGNS = (
    C.StudyDesign("n", "Training length n", "d = 4, k = 6, one-hot; n in {128, 256, 512, 1024}; 5 seeds", ("n",)),
)
