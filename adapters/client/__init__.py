"""A typed Python client for the HTTP API, with one sub-client per resource."""
