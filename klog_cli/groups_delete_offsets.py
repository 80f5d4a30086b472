"""`klog groups delete-offsets GROUP --topic T [--partitions P ...]`: kafka-consumer-groups'
--delete-offsets (OffsetDelete, KIP-496).

The coordinator decides as Kafka's: an empty group loses the offsets named; a live consumer
group keeps those of topics a member is subscribed to (GROUP_SUBSCRIBED_TO_TOPIC) and loses
the others. One line per partition, Kafka's "Successful" or the error; exit status 1 when any
partition (or the group) was refused.
"""

from __future__ import annotations

import sys

from klog.errors import KafkaError
from klog.types import TopicPartition


def add_arguments(parser) -> None:
    parser.add_argument("group")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", nargs="+", metavar="P",
                        help="partition numbers, space or comma separated (default: all)")


def run(admin, args) -> int:
    if args.partitions:
        numbers = sorted({int(p) for item in args.partitions for p in item.split(",")
                          if p.strip()})
    else:
        numbers = [p.partition for p in admin.describe_topic(args.topic).partitions]
    results = admin.delete_group_offsets(
        args.group, [TopicPartition(args.topic, n) for n in numbers])
    failed = any(isinstance(error, KafkaError) for error in results.values())
    print(f"{'Request succeed' if not failed else 'Request partly refused'} for deleting "
          f"offsets with topic {args.topic} group {args.group}")
    print("TOPIC\tPARTITION\tSTATUS")
    for tp, error in sorted(results.items()):
        status = "Successful" if error is None else f"Error: {error.code.name}"
        print(f"{tp.topic}\t{tp.partition}\t{status}")
    sys.stdout.flush()
    return 1 if failed else 0
