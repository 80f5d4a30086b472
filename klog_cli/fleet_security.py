"""The fleet's SCRAM users and ACLs in ZooKeeper for `klog users` and `klog acls` given a config
with `zookeeper.connect`: as Kafka's kafka-configs and kafka-acls write them there, before any
appliance started or while they run (every appliance follows the change notifications)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from appliance.config import BrokerConfig, load_config
from cluster.security_store import SecurityStore
from cluster.session import Session


@contextmanager
def security_store(config: BrokerConfig) -> Iterator[SecurityStore]:
    """A store on a session of its own (with `zookeeper.digest.credentials` when set), its
    roots made, read once. Raises ZooKeeperUnavailable."""
    session = Session(config.zookeeper_connect,
                      session_timeout_ms=config.zookeeper_session_timeout_ms,
                      connection_timeout_ms=config.zookeeper_connection_timeout_ms,
                      digest_credentials=config.zookeeper_digest_credentials,
                      set_acl=config.zookeeper_set_acl)
    try:
        session.start()
        store = SecurityStore(session)
        store.prepare()
        store.refresh()
        yield store
    finally:
        session.stop()


class StoreAcls:
    """What `FleetAclBook` asks of the fleet, on a store held by a command."""

    def __init__(self, store: SecurityStore) -> None:
        self.store = store

    def acl_rows(self):
        return self.store.acls()

    def update_acls(self, resource, change) -> None:
        self.store.update_acls(resource, change)


def session_auth(args) -> dict:
    """The Session keywords for a `klog cluster` command given `--config`: the appliance's
    ZooKeeper credentials (`zookeeper.digest.credentials`, `zookeeper.set.acl`), without
    which its writes to a secured fleet's znodes are refused. None with `--zookeeper` alone."""
    if not getattr(args, "config", None):
        return {}
    config = load_config(args.config)
    return {"digest_credentials": config.zookeeper_digest_credentials,
            "set_acl": config.zookeeper_set_acl}
