"""The studies, one folder each (``python -m analyses list``); ``_template/`` is the one to copy."""
