"""The MCP server: the same commands as the REST API, as tools and resources for an agent.

``server`` builds it (over stdio for ``dream mcp``, over streamable HTTP at ``/mcp`` of
``dream serve``); ``tools`` and ``resources`` call the same functions as the routes;
``auth`` says who calls; ``notifications`` tells clients when approved knowledge changed.
"""
