"""The API's operations, whatever carries them: each takes an :class:`Acting` (the deployment,
who calls, how its read models are read) and the call's checked arguments, asks one use case or
query, and answers a response model.

The REST routes (``adapters.http.routes``) and the MCP tools (``adapters.mcp.tools``) are two
thin transports over these functions: a route adds its status codes and headers, a tool its
description; neither calls the other.
"""
