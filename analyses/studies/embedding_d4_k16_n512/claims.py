"""The claims of the cell d = 4, k = 16 at the papers' n = 512: the rules of every embedding cell (docs/claims.md,
study ``embedding_n512``)."""

from analyses import claims as C

CLAIMS = tuple(C.embedding_pair_claims(4, 16, "embedding_n512"))
