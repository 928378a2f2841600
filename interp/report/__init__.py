"""The ``interp report`` page and the figures of the report, ``interp evaluate`` and the notebooks.

``builder`` writes the page (``build_report``) from ``instrument_run`` (the instruments at the report's settings),
``explanation`` (the live explanation of the one-step update), ``sections`` and ``page`` (the HTML); ``plots`` holds
the plotly figures. The report is a front end over ``interp.instruments`` and ``interp.evaluate``; the instruments
import nothing from it.
"""
