"""``python manage.py cronrace``: run the project's agent until SIGTERM or SIGINT."""

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.module_loading import import_string

from cronrace import Agent, CronraceError


class Command(BaseCommand):
    help = "Run the cronrace agent (settings.CRONRACE_AGENT) until SIGTERM or SIGINT."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--agent", default=settings.CRONRACE_AGENT, help="Import path.")

    def handle(self, *args: Any, **options: Any) -> None:
        agent = import_string(options["agent"])
        if not isinstance(agent, Agent):
            raise CommandError(f"{options['agent']} is a {type(agent).__name__}, not an Agent")
        try:
            agent.run_sync()  # a first signal stops gracefully, a second at once
        except CronraceError as exc:  # e.g. Redis unreachable or refusing: one line
            raise CommandError(str(exc)) from None
