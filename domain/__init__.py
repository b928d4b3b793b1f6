"""Pure domain model of Artifact Dreaming: aggregates, events, value objects, rules.

Nothing here performs I/O, reads the clock or draws random numbers: every value an event's
``apply`` needs travels in the event itself, so replay is deterministic.
"""
