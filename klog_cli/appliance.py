"""`klog appliance run --config server.properties`: run an appliance in the foreground.

The supervisor starts one worker per `log.dirs` entry and logs to stderr. SIGTERM and SIGINT
stop it gracefully (stop accepting, answer what is in flight, flush, exit 0); SIGHUP reloads
what can be reloaded. A bad configuration stops start-up with a message naming the key, and
exit status 2; an appliance already running with the same config, or a log dir another
appliance (or its workers, still stopping) holds past the wait for its `.lock`, exit status 1.
"""

from __future__ import annotations

import logging
import sys

from appliance.config import ConfigError, load_config
from appliance.fleet_membership import FleetUnavailableError
from appliance.identity import IdentityError
from appliance.log_dir_lock import LogDirLockedError
from appliance.shm.region import RegionError
from appliance.supervisor import Supervisor


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
                        format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config, args.override)
    except ConfigError as exc:
        print(f"klog: {exc}", file=sys.stderr)
        return 2
    for key in config.ignored_keys:
        logging.getLogger("klog").warning("ignoring Kafka setting %r: klog has no use for it",
                                          key)
    supervisor = Supervisor(config, reload_config=lambda: load_config(args.config,
                                                                      args.override))
    try:
        return supervisor.run()
    except (RegionError, IdentityError, ConfigError, FleetUnavailableError,
            LogDirLockedError) as exc:
        print(f"klog: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"klog: cannot start: {exc}", file=sys.stderr)
        return 1
