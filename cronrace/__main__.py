"""``python -m cronrace``: the same as the ``cronrace`` command."""

from cronrace.cli import main

main()
