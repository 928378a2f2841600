"""The claims of one-hot vs binary stability at d = 32, k = 25 and the papers' n = 512 (study ``stability_n512``): the
rules of the n = 128 cell (``C.stability_claims``, docs/claims.md)."""

from analyses import claims as C

CLAIMS = tuple(C.stability_claims("stability_n512"))

# The design of the study these claims decide (docs/claims.md): its grid, the tables its claims read, the seeds a cell
# needs.
DESIGNS = (
    C.StudyDesign("stability_n512", "One-hot vs binary stability without gradient clipping at the papers' n = 512",
                  "d = 32, k = 25, n = 512, tau = 0.1, no clipping; embedding in {onehot, binary}; 10,000 steps, "
                  "10 seeds; the rules of the n = 128 study", ("stability_d32_k25_n512",), C.STABILITY_SEEDS),
)
