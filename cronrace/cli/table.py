"""Tables that fit the terminal without cutting what an operator greps for.

A table is a list of :class:`Col` (header, priority, how its cells may break) and rows of
strings. :func:`fit` chooses the columns and their widths for a given width:

- every cell keeps its words whole: a job name, an outcome or a node id is never cut,
  never folded across lines and never replaced by an ellipsis;
- when the words do not fit side by side, whole columns are left out, lowest priority
  first, and the caller says which (``--wide`` shows them all);
- what is left is laid out with explicit widths, so rich never has to squeeze a column
  below its longest word (its own collapse would fold ``skipped:not_replicated``).

Free text (error texts, outputs) is the exception: it is wrapped to the room left and
may break inside long words, since it is no identifier.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rich is imported when a table is laid out, not when a command is declared
    from rich.table import Table

#: Between two columns: one space of padding each side and the separator.
GAP = 3
#: Free text gets at least this many columns, or its column is left out.
MIN_TEXT_WIDTH = 24


@dataclass(frozen=True, slots=True)
class Col:
    """One column of a table.

    Attributes:
        header: the column's title.
        priority: 0 is never left out; higher numbers are left out first.
        whole: the cell never wraps (schedules: ``*/5 * * * *`` is unreadable on 2 lines).
        text: free text, wrapped to the room left; may break inside long words.
        right: right-justified (numbers).
    """

    header: str
    priority: int = 0
    whole: bool = False
    text: bool = False
    right: bool = False


def _min_width(col: Col, cells: Sequence[str]) -> int:
    from rich.cells import cell_len

    if col.text:
        return MIN_TEXT_WIDTH
    if col.whole:
        widths = [cell_len(line) for cell in cells for line in cell.splitlines() or [""]]
    else:
        widths = [cell_len(word) for cell in cells for word in cell.split()]
    return max([cell_len(col.header), *widths])


def _max_width(col: Col, cells: Sequence[str]) -> int:
    from rich.cells import cell_len

    widths = [cell_len(line) for cell in cells for line in cell.splitlines() or [""]]
    return max([cell_len(col.header), *widths])


@dataclass(frozen=True, slots=True)
class Fitted:
    """A laid-out table and the headers of the columns left out."""

    table: Table
    width: int
    dropped: tuple[str, ...]

    def note(self) -> str | None:
        """``left out: zone, missed (--wide shows every column)``, or None."""
        if not self.dropped:
            return None
        return f"left out: {', '.join(self.dropped)} (--wide shows every column)"


def fit(
    title: str | None, cols: Sequence[Col], rows: Sequence[Sequence[str]], width: int | None
) -> Fitted:
    """Lay out ``rows`` under ``cols`` within ``width`` columns (None: as wide as needed).

    Args:
        title: printed above the table, left-aligned.
        cols: the columns, in display order.
        rows: one string per column per row.
        width: the terminal's width; None for ``--wide``: every column, nothing wrapped.
    """
    from rich import box
    from rich.table import Table

    cells = [[row[i] for row in rows] for i in range(len(cols))]
    mins = [_min_width(col, cells[i]) for i, col in enumerate(cols)]
    maxes = [_max_width(col, cells[i]) for i, col in enumerate(cols)]
    keep = list(range(len(cols)))

    def needed(indexes: list[int], widths: list[int]) -> int:
        return sum(widths[i] for i in indexes) + GAP * (len(indexes) - 1)

    if width is None:
        widths = list(maxes)
        width = needed(keep, widths)
    else:
        # Columns that are never left out first; then each other column, most important
        # first, if it fits on one line beside them (free text: in TEXT_WIDTH columns).
        # A wide column that does not fit leaves room for narrower, less important ones;
        # adding a column never makes the ones already there wrap.
        keep = [i for i in keep if cols[i].priority == 0]
        one_line = [MIN_TEXT_WIDTH if col.text else maxes[i] for i, col in enumerate(cols)]
        base = one_line if needed(keep, one_line) <= width else mins
        for i in sorted(range(len(cols)), key=lambda i: (cols[i].priority, i)):
            if i not in keep and needed(keep, base) + GAP + one_line[i] <= width:
                keep = sorted([*keep, i])
        widths = list(mins)
        room = width - needed(keep, widths)
        for i in sorted(keep, key=lambda i: (cols[i].priority, i)):  # most important first
            grow = min(room, maxes[i] - widths[i])
            widths[i] += max(0, grow)
            room -= max(0, grow)
    table = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        expand=False,
    )
    for i in keep:
        col = cols[i]
        table.add_column(
            col.header,
            width=widths[i],
            justify="right" if col.right else "left",
            no_wrap=col.whole,
            overflow="fold",
        )
    for row in rows:
        table.add_row(
            *(
                textwrap.fill(row[i], widths[i], break_on_hyphens=False)
                if cols[i].text and row[i]
                else row[i]
                for i in keep
            )
        )
    dropped = tuple(cols[i].header for i in range(len(cols)) if i not in keep)
    return Fitted(table=table, width=needed(keep, widths), dropped=dropped)
