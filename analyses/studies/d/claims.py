"""The claim of the dimension grid at k = 6 (study ``d``, paper 2 Figs. 10b, 15; docs/claims.md)."""

from analyses import claims as C

CLAIMS = (C.grid_claim("d", "d", (4, 8, 16, 32), "k = 6", "paper 2 Figs. 10b, 15"),)
