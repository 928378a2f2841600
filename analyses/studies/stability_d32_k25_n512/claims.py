"""The claims of one-hot vs binary stability at d = 32, k = 25 and the papers' n = 512 (study ``stability_n512``): the
rules of the n = 128 cell (``C.stability_claims``, docs/claims.md)."""

from analyses import claims as C

CLAIMS = tuple(C.stability_claims("stability_n512"))
