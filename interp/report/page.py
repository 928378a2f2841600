"""One self-contained HTML page (``Report``: headings, HTML fragments and plotly figures, plotly.js embedded once)
and the formatting of its tables and numbers."""

from __future__ import annotations

import html
import math
from pathlib import Path

from plotly.offline import get_plotlyjs

from interp._io import write_text_atomically


def table(rows: list[dict], digits: int = 4) -> str:
    """An HTML table of ``rows`` (one dict a row, the first row's keys as the header); floats to ``digits``."""
    if not rows:
        return "<p>(none)</p>"

    def cell(value):
        if isinstance(value, float):
            return f"{value:.{digits}g}" if abs(value) < 1e-3 or abs(value) >= 1e4 else f"{value:.{digits}f}"
        return html.escape(str(value))

    head = "".join(f"<th>{html.escape(str(key))}</th>" for key in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row.values()) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class Report:
    """Collects sections (HTML and plotly figures) and writes one page."""

    def __init__(self, title: str):
        self.title = title
        self.parts: list[str] = []

    def heading(self, text: str, note: str = "") -> None:
        self.parts.append(f"<h2>{html.escape(text)}</h2>" + (f"<p>{note}</p>" if note else ""))

    def html(self, fragment: str) -> None:
        self.parts.append(fragment)

    def figure(self, figure) -> None:
        self.parts.append(figure.to_html(full_html=False, include_plotlyjs=False))

    def opening(self, heading: str, bullets: list[str], note: str = "") -> None:
        """A section put first on the page (the findings): a heading and a list of HTML bullets."""
        items = "".join(f"<li>{bullet}</li>" for bullet in bullets)
        self.parts.insert(0, f"<h2>{html.escape(heading)}</h2><ul class='findings'>{items}</ul>"
                          + (f"<p>{note}</p>" if note else ""))

    def write(self, path: str | Path) -> Path:
        """The page, written atomically into a folder that exists (none is created)."""
        style = ("body{font-family:sans-serif;max-width:1400px;margin:auto;padding:1em;box-sizing:border-box}"
                 "table{border-collapse:collapse;margin:0.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;"
                 "text-align:right}th{background:#eee}pre{white-space:pre-wrap}ul.findings li{margin:0.3em 0}")
        page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(self.title)}</title>"
                f"<style>{style}</style><script type='text/javascript'>{get_plotlyjs()}</script></head>"
                f"<body><h1>{html.escape(self.title)}</h1>{''.join(self.parts)}</body></html>")
        return write_text_atomically(path, page)


def number(value: float, digits: int = 3, sign: bool = False) -> str:
    """``value`` to ``digits`` decimals (with its sign if ``sign``); "n/a" for None or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    value = round(float(value), digits) + 0.0
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def params_text(parameters: dict[str, float]) -> str:
    """``name = value, ...`` of a distilled algorithm's parameters."""
    return ", ".join(f"{name} = {value:.3g}" for name, value in parameters.items())
