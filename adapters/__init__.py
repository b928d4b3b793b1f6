"""Everything that touches the outside: stores, settings, CLI, HTTP, generators."""
