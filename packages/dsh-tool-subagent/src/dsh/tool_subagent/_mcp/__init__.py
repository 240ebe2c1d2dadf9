"""``dsh mcp``: a profile's tools served over MCP stdio (extra ``dsh-tool-subagent[mcp]``).

``command`` is the entry point, ``opening`` answers a connection's ``initialize`` and
``tools/list`` before the SDK is loaded, and ``server`` is the MCP server on the official SDK's
low-level ``Server``; ``calls`` runs one connection's tool calls, ``notices`` delivers its owner's
completion notices, ``drain`` answers what was received before stdin closed, and ``stdin`` /
``streams`` are the transport pieces.
"""
