"""The ``dream`` command line: one module per group of commands, wired up in ``main``."""
