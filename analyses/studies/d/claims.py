"""The claim of the dimension grid at k = 6 (study ``d``, paper 2 Figs. 10b, 15; docs/claims.md)."""

from analyses import claims as C

CLAIMS = (C.grid_claim("d", "d", (4, 8, 16, 32), "k = 6", "paper 2 Figs. 10b, 15"),)

# The design of the study these claims decide (docs/claims.md): its grid, the tables its claims read, the seeds a cell
# needs.
DESIGNS = (
    C.StudyDesign("d", "Dimension d", "k = 6, one-hot, n = 128, tau = 0.1; d in {4, 8, 16, 32}; 10,000 steps, 5 seeds",
                  ("d",)),
)
