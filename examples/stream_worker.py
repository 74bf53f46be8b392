"""A worker that does the slow part of a job handed off by a cronrace stream target.

The sidecar appends one entry per tick (fields ``job``, ``tick``, ``fence``, ``node``,
``idempotency_key``) and moves on; workers in a consumer group share the entries. This
worker refuses an entry whose fence is lower than the highest it has accepted for the
job (a run that lost its lease to a newer one), and acknowledges every entry::

    python examples/stream_worker.py --redis-url redis://127.0.0.1:6379/0 --stream work
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys

import redis


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--stream", default="cronrace:work")
    parser.add_argument("--group", default="workers")
    parser.add_argument("--consumer", default=socket.gethostname())
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # Block for less than the socket timeout, or an idle stream reads as a timeout error.
    client = redis.Redis.from_url(args.redis_url, decode_responses=True, socket_timeout=10)
    try:
        client.xgroup_create(args.stream, args.group, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise
    # A real worker keeps this in its own database, next to the work it does.
    highest_fence: dict[str, int] = {}
    print(f"worker {args.consumer} reading {args.stream} as group {args.group}", flush=True)
    while True:
        reply = client.xreadgroup(
            args.group, args.consumer, {args.stream: ">"}, count=10, block=2000
        )
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                job, fence = fields.get("job", "?"), int(fields.get("fence", 0))
                if fence < highest_fence.get(job, 0):
                    print(f"{entry_id}: {job} fence {fence} is stale: refused", flush=True)
                else:
                    highest_fence[job] = fence
                    print(
                        f"{entry_id}: {job} tick {fields.get('tick')} fence {fence}: done",
                        flush=True,
                    )
                client.xack(args.stream, args.group, entry_id)


if __name__ == "__main__":
    main()
