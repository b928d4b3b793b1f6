"""Everything that touches the outside: stores, settings, CLI, HTTP, client, generators, workers."""
