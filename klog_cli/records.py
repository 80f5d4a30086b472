"""`klog records delete`: Kafka's kafka-delete-records.sh.

The partitions and offsets come from a JSON file in Kafka's shape (`--offset-json-file`:
``{"partitions": [{"topic": "t", "partition": 0, "offset": 3}], "version": 1}``) and/or from
flags (`--topic T [--partitions P ...] --offset N`, every partition of T when none is named);
offset -1 means the high watermark. Each partition's log start moves up to its offset on its
leader (klog.Admin.delete_records). The output is Kafka's tool's, one line per partition with
its new low watermark or its error; the exit status is 1 when any partition failed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import orjson

from klog.errors import KafkaError
from klog.types import TopicPartition
from klog_cli.admin_action import run_action


def add_arguments(parser) -> None:
    parser.add_argument("--bootstrap-server", "-b", default="127.0.0.1:9092",
                        help="host:port[,host:port] of the appliance")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    delete = actions.add_parser("delete", help="delete records before an offset (move the "
                                "log start), as kafka-delete-records")
    delete.add_argument("--offset-json-file", type=Path, metavar="FILE",
                        help='{"partitions": [{"topic": T, "partition": P, "offset": N}], '
                             '"version": 1}')
    delete.add_argument("--topic", help="a topic (with --offset)")
    delete.add_argument("--partitions", nargs="+", metavar="P",
                        help="partition numbers, space or comma separated (default: all)")
    delete.add_argument("--offset", type=int, metavar="N",
                        help="delete records before offset N (-1: the high watermark)")


def run(args) -> int:
    return run_action(args, ACTIONS)


def offsets_from_json(text: str) -> dict[TopicPartition, int]:
    """Kafka's offset JSON file; ValueError naming what is wrong (duplicates included)."""
    try:
        document = orjson.loads(text)
        entries = document["partitions"]
        pairs = [(TopicPartition(str(e["topic"]), _integer(e["partition"])),
                  _integer(e["offset"])) for e in entries]
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"the offset JSON file is not Kafka's shape ({exc}): "
                         '{"partitions": [{"topic": "t", "partition": 0, "offset": 3}], '
                         '"version": 1}') from None
    offsets = dict(pairs)
    if len(offsets) != len(pairs):
        raise ValueError("the offset JSON file contains duplicate topic partitions")
    return offsets


def _integer(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{value!r} is not an integer")
    return value


def _offsets(admin, args) -> dict[TopicPartition, int]:
    offsets: dict[TopicPartition, int] = {}
    if args.offset_json_file is not None:
        try:
            text = args.offset_json_file.read_text()
        except OSError as exc:
            raise ValueError(f"cannot read {args.offset_json_file}: {exc.strerror}") from None
        offsets.update(offsets_from_json(text))
    if args.topic is not None or args.offset is not None or args.partitions:
        if args.topic is None or args.offset is None:
            raise ValueError("--topic and --offset go together")
        if args.partitions:
            numbers = sorted({int(p) for item in args.partitions for p in item.split(",")
                              if p.strip()})
        else:
            numbers = [p.partition for p in admin.describe_topic(args.topic).partitions]
        for number in numbers:
            tp = TopicPartition(args.topic, number)
            if tp in offsets:
                raise ValueError(f"{args.topic}-{number} is named twice")
            offsets[tp] = args.offset
    if not offsets:
        raise ValueError("name the partitions: --offset-json-file FILE, or --topic T --offset N")
    negative = [tp for tp, offset in offsets.items() if offset < -1]
    if negative:
        raise ValueError(f"offset {offsets[negative[0]]} of {negative[0].topic}-"
                         f"{negative[0].partition}: an offset is >= 0, or -1 (the high "
                         f"watermark)")
    return offsets


def _delete(admin, args) -> int:
    offsets = _offsets(admin, args)
    print("Executing records delete operation")
    results = admin.delete_records(offsets)
    print("Records delete operation completed:")
    failed = False
    for tp, outcome in results.items():
        if isinstance(outcome, KafkaError):
            failed = True
            print(f"partition: {tp.topic}-{tp.partition}\terror: {outcome}")
        else:
            print(f"partition: {tp.topic}-{tp.partition}\tlow_watermark: {outcome}")
    sys.stdout.flush()
    return 1 if failed else 0


ACTIONS = {"delete": _delete}
