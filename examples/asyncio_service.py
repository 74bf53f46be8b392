"""A plain asyncio service with its own work and a cronrace agent beside it.

The service (here: a TCP echo server, standing for a queue consumer or any long-running
loop) runs inside ``async with agent:``; SIGTERM or Ctrl-C leaves the block, which stops
the agent gracefully. Run it with::

    CRONRACE_STORE_URL=redis://127.0.0.1:6379/0 python examples/asyncio_service.py --port 8765

in two or more terminals: each tick of ``compact`` prints on exactly one of them.
"""

from __future__ import annotations

import argparse
import asyncio
import signal

from cronrace import Agent, RunContext

agent = Agent()  # settings from CRONRACE_* (store_url, namespace, node_id, ...)


@agent.job("@every 2s", name="compact")
async def compact(ctx: RunContext) -> str:
    print(f"compact: tick {ctx.tick:%H:%M:%S} fence {ctx.fence} on {ctx.node_id}", flush=True)
    return "compacted"


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The service's own work: answer every line with itself."""
    while line := await reader.readline():
        writer.write(line)
        await writer.drain()
    writer.close()


async def main(port: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    server = await asyncio.start_server(echo, "127.0.0.1", port)
    async with server, agent:  # the agent is ready here, or this raised
        print(f"serving on 127.0.0.1:{port} as node {agent.node_id}", flush=True)
        await stop.wait()
    print("stopped", flush=True)  # the agent has shut down: no task of it is left


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8765)
    asyncio.run(main(parser.parse_args().port))
