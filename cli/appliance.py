"""`klog appliance run --config server.properties`: run an appliance in the foreground.

Logs go to stderr. SIGTERM and SIGINT stop it gracefully: stop accepting, answer what is in
flight, flush, close the logs, exit 0. A bad configuration stops start-up with a message that
names the key, and exit status 2.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from appliance.config import ConfigError, load_config
from appliance.workers.worker import run_worker


def add_arguments(parser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    run = actions.add_parser("run", help="run an appliance in the foreground")
    run.add_argument("--config", "-c", help="a server.properties file (Kafka's format and keys)")
    run.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                     help="override one setting of the file, as Kafka's --override does")
    run.add_argument("--log-level", default="INFO",
                     choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def run(args) -> int:
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config, args.override)
    except ConfigError as exc:
        print(f"klog: {exc}", file=sys.stderr)
        return 2
    for key in config.ignored_keys:
        logging.getLogger("klog").warning("ignoring Kafka setting %r: klog has no use for it",
                                          key)
    return asyncio.run(_serve(config))


async def _serve(config) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await run_worker(config, stop=stop)
    except OSError as exc:
        print(f"klog: cannot serve on {config.listeners}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    return 0
