"""`klog consume`: print a topic's messages (Kafka's kafka-console-consumer, kcat -C).

Reads every partition (or ``--partition``) from the end, ``--from-beginning``, or
``--offset N``, and prints each message with ``--format``, kcat's notation:
``%t`` topic, ``%p`` partition, ``%o`` offset, ``%k`` key, ``%s`` value, ``%T`` timestamp
(ms), ``%h`` headers (``k=v,k2=v2``), ``%K``/``%S`` key/value size, ``%%``; escapes ``\\n``
``\\t`` ``\\r`` ``\\\\``. The default is ``%s\\n``. Keys and values are written as raw bytes.
It runs until interrupted, ``--max-messages`` were printed, or (``--exit``) the end of every
partition as it was at start-up is reached.

With ``--group G`` it consumes as a member of consumer group G, like kcat -G or
kafka-console-consumer --group: the group assigns the partitions (other members share them),
each starts at the group's committed offset (``--from-beginning``: the earliest one when
nothing is committed), and positions are committed as it goes and when it exits. ``--exit``
then stops at the end of the partitions assigned to it.
"""

from __future__ import annotations

import re
import sys

from klog.consumer import Consumer
from klog.errors import KlogError
from klog.types import TopicPartition

_TOKENS = re.compile(r"%[tpokshTKS%]|\\[ntr\\]|[^%\\]+|[%\\]")
_ESCAPES = {"\\n": b"\n", "\\t": b"\t", "\\r": b"\r", "\\\\": b"\\"}


def add_arguments(parser) -> None:
    parser.add_argument("--bootstrap-server", "-b", default="127.0.0.1:9092",
                        help="host:port[,host:port] of the appliance")
    parser.add_argument("--topic", "-t", required=True)
    parser.add_argument("--partition", "-p", type=int, help="only this partition")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true",
                       help="start at the earliest offset (default: only new messages)")
    start.add_argument("--offset", "-o", type=int, metavar="N",
                       help="start at offset N of every chosen partition")
    parser.add_argument("--format", "-f", default=r"%s\n", help="kcat-style output format")
    parser.add_argument("--max-messages", "-c", type=int, metavar="N",
                        help="exit after N messages")
    parser.add_argument("--exit", "-e", action="store_true",
                        help="exit at the end of the partitions (as they were at start-up)")
    parser.add_argument("--group", "-G", metavar="GROUP",
                        help="consume as a member of this consumer group (offsets committed)")
    parser.add_argument("--isolation-level", choices=("read_uncommitted", "read_committed"),
                        default="read_uncommitted",
                        help="read_committed: only committed transactions' records, up to the "
                        "last stable offset (kafka-console-consumer's option)")


def compile_format(fmt: str):
    """``fmt`` into a function record -> bytes."""
    parts = []
    for token in _TOKENS.findall(fmt):
        if token in _ESCAPES:
            parts.append(_ESCAPES[token])
        elif len(token) == 2 and token[0] == "%":
            parts.append(_FIELDS[token[1]])
        else:
            parts.append(token.encode())

    def render(record) -> bytes:
        return b"".join(p if isinstance(p, bytes) else p(record) for p in parts)

    return render


def _headers(record) -> bytes:
    return b",".join(k.encode() + b"=" + (v or b"") for k, v in record.headers)


_FIELDS = {
    "t": lambda r: r.topic.encode(),
    "p": lambda r: str(r.partition).encode(),
    "o": lambda r: str(r.offset).encode(),
    "k": lambda r: r.key or b"",
    "s": lambda r: r.value or b"",
    "T": lambda r: str(r.timestamp).encode(),
    "h": _headers,
    "K": lambda r: str(-1 if r.key is None else len(r.key)).encode(),
    "S": lambda r: str(-1 if r.value is None else len(r.value)).encode(),
    "%": lambda r: b"%",
}


def run(args) -> int:
    if args.group and (args.partition is not None or args.offset is not None):
        print("klog: with --group the group assigns the partitions and their offsets: drop "
              "--partition/--offset", file=sys.stderr)
        return 2
    render = compile_format(args.format)
    out = sys.stdout.buffer
    try:
        with Consumer(bootstrap_servers=args.bootstrap_server,
                      auto_offset_reset="earliest" if args.from_beginning else "latest",
                      request_timeout_ms=10_000, group_id=args.group,
                      isolation_level=args.isolation_level) as consumer:
            if args.group:
                _consume_in_group(consumer, args, render, out)
                return 0
            chosen = _assign(consumer, args)
            ends = consumer.end_offsets(chosen) if args.exit else None
            if args.max_messages == 0 or ends is not None and _done(consumer, ends):
                return 0
            if ends is not None:
                _consume_to_ends(consumer, args, render, out, ends)
                return 0
            for printed, record in enumerate(consumer, 1):
                out.write(render(record))
                if args.max_messages is not None and printed >= args.max_messages:
                    break
            out.flush()
    except (KlogError, ValueError) as exc:
        print(f"klog: {exc}", file=sys.stderr)
        return 1
    return 0


def _consume_to_ends(consumer, args, render, out, ends) -> None:
    """--exit: poll until every position reaches its end as it was at start-up. Positions, not
    the last record's offset: transaction markers and aborted records take offsets that are
    never delivered, so a partition can end without a record at its last offset."""
    printed = 0
    while args.max_messages is None or printed < args.max_messages:
        left = None if args.max_messages is None else args.max_messages - printed
        for records in consumer.poll(timeout_ms=500, max_records=left).values():
            for record in records:
                out.write(render(record))
            printed += len(records)
        out.flush()
        if _done(consumer, ends):
            return


def _consume_in_group(consumer, args, render, out) -> None:
    """Poll as a group member; polls take at most what is left of --max-messages, so the
    offsets committed at exit are exactly past what was printed."""
    consumer.partitions_for_topic(args.topic)  # an unknown topic is an error, as without -G
    consumer.subscribe([args.topic])
    printed, ends = 0, {}
    while args.max_messages is None or printed < args.max_messages:
        left = None if args.max_messages is None else args.max_messages - printed
        for records in consumer.poll(timeout_ms=500, max_records=left).values():
            for record in records:
                out.write(render(record))
            printed += len(records)
        out.flush()
        if args.exit:
            assigned = consumer.assignment()
            if assigned - ends.keys():
                ends.update(consumer.end_offsets(assigned - ends.keys()))
            if assigned and _done(consumer, {tp: ends[tp] for tp in assigned}):
                return


def _assign(consumer, args) -> list[TopicPartition]:
    partitions = consumer.partitions_for_topic(args.topic)
    if args.partition is not None:
        if args.partition not in partitions:
            raise ValueError(f"topic {args.topic!r} has no partition {args.partition} "
                             f"(it has {len(partitions)})")
        partitions = {args.partition}
    chosen = [TopicPartition(args.topic, p) for p in sorted(partitions)]
    consumer.assign(chosen)
    if args.offset is not None:
        if args.offset < 0:
            raise ValueError("--offset must be >= 0")
        for tp in chosen:
            consumer.seek(tp, args.offset)
    return chosen


def _done(consumer, ends) -> bool:
    return all(consumer.position(tp) >= end for tp, end in ends.items())
