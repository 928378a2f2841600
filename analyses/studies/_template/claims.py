"""<The study's claims: each a rule and a control, committed before the runs (docs/claims.md).>

Delete this file if the study decides claims registered elsewhere; otherwise build ``analyses.claims.Claim`` objects
(see ``analyses.claims.embedding_pair_claims`` for a whole example) and list them in CLAIMS.
"""

CLAIMS = ()
