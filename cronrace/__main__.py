"""``python -m cronrace``: the same as the ``cronrace`` command."""

from cronrace.cli.main import main

main()
