"""The claims of the cell d = 4, k = 16: the rules of every embedding cell (docs/claims.md, study ``embedding``)."""

from analyses import claims as C

CLAIMS = tuple(C.embedding_pair_claims(4, 16))
