"""Consumer groups, the client half of Kafka's classic group protocol. Sans-IO: the consumer's
protocol object drives `GroupProtocol` like its other parts; see `protocol` for the pieces."""

from klog.consumer.group.events import Assign, CommitDone, Revoke
from klog.consumer.group.group_machine import GROUP_APIS, GroupProtocol

__all__ = ["GROUP_APIS", "Assign", "CommitDone", "GroupProtocol", "Revoke"]
