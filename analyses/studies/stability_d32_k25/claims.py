"""The claims of one-hot vs binary stability without gradient clipping at d = 32, k = 25 (study ``stability``,
paper 2 §3; docs/claims.md). The same rules decide the n = 512 cell (stability_d32_k25_n512)."""

from analyses import claims as C

CLAIMS = tuple(C.stability_claims("stability"))

# The design of the study these claims decide (docs/claims.md): its grid, the tables its claims read, the seeds a cell
# needs.
DESIGNS = (
    C.StudyDesign("stability", "One-hot vs binary stability without gradient clipping",
                  "d = 32, k = 25, n = 128, tau = 0.1, no clipping; embedding in {onehot, binary}; 10,000 steps, "
                  "10 seeds", ("stability_d32_k25",), C.STABILITY_SEEDS),
)
