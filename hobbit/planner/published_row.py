"""A published row's cells, and what reading it assumed or found it cannot model (``Row``)."""

from __future__ import annotations

import re

NOT_STATED = re.compile(r"^\s*$|not stated|unknown|^n/?a\b|^-+$|^\?$", re.IGNORECASE)  # a cell that states nothing


class Row:
    """A row's cells, and what reading it assumed or found unmodelled."""

    def __init__(self, cells: dict[str, str]) -> None:
        self.cells = cells
        self.assumed: list[str] = []
        self.unmodelled: list[str] = []

    def get(self, column: str) -> str:
        return self.cells.get(column, "")

    def assume(self, text: str) -> None:
        self.assumed.append(text)

    def cannot(self, text: str) -> None:
        self.unmodelled.append(text)


def bad(column: str, text: str, why: str) -> ValueError:
    return ValueError(f"{column}: '{text}' {why}")
