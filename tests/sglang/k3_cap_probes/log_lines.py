"""A logging handler that keeps the message of every WARNING (and above) it sees."""

import logging


class WarningLines(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())
