"""The HTTP API (FastAPI): routes translate JSON to commands and domain values back to JSON."""
