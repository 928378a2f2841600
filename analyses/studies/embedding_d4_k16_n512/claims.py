"""The claims of the cell d = 4, k = 16 at the papers' n = 512: the rules of every embedding cell (docs/claims.md,
study ``embedding_n512``)."""

from analyses import claims as C

CLAIMS = tuple(C.embedding_pair_claims(4, 16, "embedding_n512"))

# The design of the study these claims decide (docs/claims.md): its grid, the tables its claims read, the seeds a cell
# needs.
DESIGNS = (
    C.StudyDesign("embedding_n512", "Embedding width at the papers' n = 512, d = 4, k = 16",
                  "(d, k) = (4, 16) x embedding in {onehot, binary, none}; n = 512, tau = 0.1, NE loss; 10,000 steps, "
                  "5 seeds; the rules of the n = 128 study", ("embedding_d4_k16_n512",)),
)
