"""Consumer groups: the coordinator a worker runs for the groups whose offsets it stores.

A group belongs to one partition of the internal topic ``__consumer_offsets`` (Kafka's rule:
the group id's Java hash modulo the partition count), and the worker that owns that partition
coordinates the group: membership and rebalancing (``group``), committed offsets kept in that
partition (``offsets_log``), both tied to the worker's loop and disk by ``coordinator``.
"""
