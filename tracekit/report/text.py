"""Text from a trace, a file name or run.json, made safe for a terminal.

Use these for anything a renderer did not write itself (kernel, request and step names, run ids,
warnings, paths, query results): ``visible`` writes control characters as escapes (an ESC or OSC
sequence in a kernel name is shown, never sent), ``markup_safe`` also escapes rich markup (a name
like ``[/x]`` or ``[bold]`` is text, not a tag), ``cell`` is a rich ``Text`` (never parsed as markup)
for table cells, headers and titles.
"""

from __future__ import annotations

from typing import Any

from tracekit.errors import lines, say, visible

__all__ = ["cell", "lines", "markup_safe", "say", "visible"]


def markup_safe(value: Any) -> str:
    """For a string printed with rich markup on: control characters visible, markup escaped."""
    from rich.markup import escape

    return escape(visible(value))


def cell(value: Any) -> Any:
    """A rich Text of ``value`` (control characters visible), for table cells, headers and titles."""
    from rich.text import Text

    return Text(visible(value))

