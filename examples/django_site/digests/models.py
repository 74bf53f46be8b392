"""What the example's job writes: one digest per tick, whichever node ran it."""

from django.db import models


class Digest(models.Model):
    tick_s = models.BigIntegerField(unique=True)  # the tick: a retried write cannot double it
    fence = models.BigIntegerField()
    node = models.CharField(max_length=200)
    sent_at = models.DateTimeField(auto_now_add=True)
