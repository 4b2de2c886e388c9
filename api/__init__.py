"""Entry points: the CLI, the HTTP API and the MCP server. Thin: parse, call, map."""
