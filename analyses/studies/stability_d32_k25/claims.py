"""The claims of one-hot vs binary stability without gradient clipping at d = 32, k = 25 (study ``stability``,
paper 2 §3; docs/claims.md). The same rules decide the n = 512 cell (stability_d32_k25_n512)."""

from analyses import claims as C

CLAIMS = tuple(C.stability_claims("stability"))
