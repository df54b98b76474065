"""Figures with their goals, printed as one Markdown table and written as JSON."""

from __future__ import annotations

import json
import operator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.measure import Turns

_COMPARE = {"≤": operator.le, "≥": operator.ge}


@dataclass
class Figure:
    case: str
    figure: str
    value: float
    unit: str = ""
    goal: str = ""  # "≤ 0.5" or "≥ 0.9"; empty for figures shown only to explain the ratios

    @property
    def passed(self) -> bool | None:
        if not self.goal:
            return None
        sign, bound = self.goal.split()
        return bool(_COMPARE[sign](self.value, float(bound)))


def median_figures(case: str, turns: Turns, *, digits: int = 2) -> list[Figure]:
    return [Figure(case, f"{name} (median)", round(seconds, digits), "s") for name, seconds in turns.items()]


def ratio_figures(case: str, turns: Turns, numerator: str, denominator: str, *, goal: str,
                  label: str = "") -> list[Figure]:
    """The goal's ratio of two sides' seconds, the median of the turns' ratios (see Turns.ratio), and beside it,
    without a goal, the ratio of the medians. ``label`` names it when it is not "numerator / denominator" (a
    throughput ratio is the inverse of the seconds')."""
    label = label or f"{numerator} / {denominator}"
    return [Figure(case, f"{label} (median of the turns' ratios)", round(turns.ratio(numerator, denominator), 2),
                   goal=goal),
            Figure(case, f"{label} (ratio of the medians)", round(turns[numerator] / turns[denominator], 2))]


def markdown(figures: list[Figure]) -> str:
    lines = ["| case | figure | value | goal | result |", "|---|---|---|---|---|"]
    for f in figures:
        cells = [f.case, f.figure, f"{f.value:g} {f.unit}".strip(), f.goal,
                 {None: "", True: "pass", False: "**miss**"}[f.passed]]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines)


def write_json(figures: list[Figure], path: Path) -> None:
    path.write_text(json.dumps([{**asdict(f), "passed": f.passed} for f in figures], indent=1, ensure_ascii=False))


def publish(figures: list[Figure], *, json_out: Path | None) -> None:
    """The table on stdout, and the JSON file when one was asked for."""
    print(markdown(figures))
    if json_out:
        write_json(figures, json_out)
