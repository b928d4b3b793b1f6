"""Use cases: the write model, its commands and the ports it needs from the outside."""
