"""Generator adapters: the deterministic offline generator and an OpenAI-compatible client."""
