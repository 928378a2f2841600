"""The claim of the cluster-count grid at d = 32 (study ``k``, paper 2 Fig. 10a; docs/claims.md)."""

from analyses import claims as C

CLAIMS = (C.grid_claim("k", "k", (6, 10, 16, 25), "d = 32", "paper 2 Fig. 10a"),)
