"""The failures the tool reports: each carries its finished one-line message (what it names and the next
step), made where it is raised; the command line prints it and exits with the class's code."""

from __future__ import annotations


class OverlayError(Exception):
    """A failure the user can act on; `str()` is its one line."""

    exit_code = 1


class UsageError(OverlayError):
    exit_code = 2


class Interrupted(OverlayError):
    exit_code = 130  # what a shell reports for Ctrl-C


def some(names: list[str]) -> str:
    """The first three of `names`, as a message lists them."""
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
