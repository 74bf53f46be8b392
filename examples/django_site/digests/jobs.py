"""The project's jobs: defined on one agent, run by ``python manage.py cronrace``.

Run that command beside the web server (its own process or container, as one runs a
worker); on N replicas, each tick runs on exactly one of them.
"""

from django.db import close_old_connections

from cronrace import Agent, RunContext

agent = Agent()  # settings from CRONRACE_* (store_url, namespace, node_id, ...)


@agent.job("0 7 * * *", name="send-digest", timezone="Europe/Paris")
def send_digest(ctx: RunContext) -> str:
    """Every morning at 7:00 in Paris, on one node: a plain `def`, so the ORM may be used."""
    from digests.models import Digest  # the app registry is ready once the command runs

    close_old_connections()  # as Django does around each request: no stale connection
    try:
        digest, created = Digest.objects.get_or_create(
            tick_s=ctx.tick_s, defaults={"fence": ctx.fence, "node": ctx.node_id}
        )
    finally:
        close_old_connections()
    return f"digest {digest.pk} {'sent' if created else 'already sent'}"
