"""Errors the command line turns into one-line messages and exit codes."""


class OverlayError(Exception):
    """A failure the user can act on: the message names the thing and the next step."""

    exit_code = 1


class UsageError(OverlayError):
    exit_code = 2


class Interrupted(OverlayError):
    exit_code = 130  # what a shell reports for Ctrl-C
