"""``python -m chatmem.mcp``: ``chatmem mcp`` without the rest of the command line."""

from chatmem.mcp.cli import main

main()
