"""`moldau broker`: run one broker until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from moldau.broker.config import BrokerConfig, parse_overrides
from moldau.broker.log.dir_lock import LogDirLockedError
from moldau.broker.server import Broker
from moldau.config import ConfigError

log = logging.getLogger("moldau.broker")


def run(config_path: str | None, override_items: list[str], log_level: str = "INFO") -> int:
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = BrokerConfig.load(config_path, parse_overrides(override_items))
    except ConfigError as exc:
        print(f"moldau broker: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(_serve(config))


async def _serve(config: BrokerConfig) -> int:
    broker = Broker(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # Start-up can wait a long time (for a controller quorum to form, say): a signal then
    # stops the broker instead of being held until start-up is over.
    starting = asyncio.create_task(broker.start())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        log.info("Stopping during start-up")
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        await broker.stop()
        return 0
    stopping.cancel()
    try:
        starting.result()
    except ConfigError as exc:
        print(f"moldau broker: {exc}", file=sys.stderr)
        await broker.stop()
        return 2
    except LogDirLockedError as exc:
        # Taken first, so nothing else has started: leave without a word more.
        print(f"moldau broker: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"moldau broker: cannot start: {exc}", file=sys.stderr)
        await broker.stop()
        return 1
    listeners = ",".join(str(endpoint) for endpoint in broker.network.bound)
    print(f"moldau broker ready: node.id={broker.node_id} listeners={listeners} "
          f"log.dirs={','.join(config.log_dirs)}", flush=True)
    if broker.http is not None:
        print(f"moldau broker metrics: {broker.http.url}/metrics (health: /livez, /readyz)",
              flush=True)
    await stop.wait()
    await broker.stop()
    return 0
