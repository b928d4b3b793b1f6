"""Read models built from the event stream (runs, review inbox, knowledge, provenance)."""
