"""The claim of the cluster-count grid at d = 32 (study ``k``, paper 2 Fig. 10a; docs/claims.md)."""

from analyses import claims as C

CLAIMS = (C.grid_claim("k", "k", (6, 10, 16, 25), "d = 32", "paper 2 Fig. 10a"),)

# The design of the study these claims decide (docs/claims.md): its grid, the tables its claims read, the seeds a cell
# needs.
DESIGNS = (
    C.StudyDesign("k", "Number of clusters k", "d = 32, one-hot, n = 128, tau = 0.1; k in {6, 10, 16, 25}; 10,000 "
                  "steps, 5 seeds", ("k",)),
)
