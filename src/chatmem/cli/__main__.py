"""``python -m chatmem.cli``: the ``chatmem`` command."""

from chatmem.cli.commands import main

main()
