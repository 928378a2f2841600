"""The Markdown number formats of the analyses' sections: fixed digits, signed, scientific, a band, a ratio.

Every format takes the figures as the committed JSON holds them (``analyses._shared.finite_or_none``): None for a
missing or NaN figure prints "n/a", the strings "inf" / "-inf" print "∞" / "−∞"; a value that rounds to zero at the
shown precision prints without a minus ("0.000", not "-0.000").
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from analyses.framework.statistics import band as _band

NA = "n/a"  # a figure that is missing (None) or not a number
MINUS = "−"  # the true minus sign of running text (U+2212)
INFINITIES = {"inf": "∞", "-inf": "−∞"}


def fixed(value, digits: int = 3, sign: bool = False, minus: str = "-") -> str:
    """``value`` to ``digits`` decimals, f"{round(v, digits) + 0.0:.{digits}f}" (``:+`` with ``sign``): "n/a" for None
    or NaN, "∞" / "−∞" for infinities, "yes" / "no" for a bool, another string as it is; ``minus`` is the character of
    negative values."""
    if value is None:
        return NA
    if isinstance(value, str):
        return INFINITIES.get(value, value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    value = float(value)
    if math.isnan(value):
        return NA
    if math.isinf(value):
        return INFINITIES["inf" if value > 0 else "-inf"]
    value = round(value, digits) + 0.0  # -0.0 + 0.0 == +0.0
    text = f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"
    return text.replace("-", minus)


def signed(value, digits: int = 3) -> str:
    """``fixed`` with the sign always shown: "+0.096", "-0.063"."""
    return fixed(value, digits, sign=True)


def scientific(value, digits: int = 1) -> str:
    """``value`` in scientific notation with ``digits`` decimals, f"{v:.{digits}e}" (1.2e-15); "n/a" for None."""
    return NA if value is None else f"{float(value):.{digits}e}"


def ratio(value) -> str:
    """A ratio to three significant digits, f"{v:.3g}"; "∞" for an infinite one (the JSON string "inf" or +inf)."""
    if value in ("inf", math.inf):
        return INFINITIES["inf"]
    return f"{value:.3g}"


def band(values: Sequence[float], digits: int = 3) -> str:
    """"median [q25, q75]" of the finite values (``analyses.framework.statistics.band``) to ``digits`` decimals;
    "n/a" when none is finite."""
    median, low, high = _band(values)
    if math.isnan(median):
        return NA
    return f"{median:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"
