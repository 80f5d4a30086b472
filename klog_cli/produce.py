"""`klog produce`: stdin lines into messages (the paper's console producer, Kafka's
kafka-console-producer).

Each line (without its newline) is one message value. With ``--key-separator SEP`` the text
before the first SEP is the key (a line without SEP is an error, as in Kafka's tool). Bytes are
passed through untouched. Delivery failures are counted and reported; the exit status is 0
only when every message was acknowledged.
"""

from __future__ import annotations

import sys

from klog.errors import KlogError
from klog.producer import Producer

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def add_arguments(parser) -> None:
    parser.add_argument("--bootstrap-server", "-b", default="127.0.0.1:9092",
                        help="host:port[,host:port] of the appliance")
    parser.add_argument("--topic", "-t", required=True)
    parser.add_argument("--key-separator", "-K", metavar="SEP",
                        help="split each line into KEY SEP VALUE at the first SEP")
    parser.add_argument("--compression", "-z", choices=CODECS, default="none")
    parser.add_argument("--acks", "-a", choices=("0", "1", "all", "-1"), default="all")
    parser.add_argument("--partition", "-p", type=int, help="send every message here")
    parser.add_argument("--linger-ms", type=int, default=5)


class _Failures:
    def __init__(self):
        self.count = 0
        self.first: BaseException | None = None

    def __call__(self, future) -> None:
        error = future.exception()
        if error is not None:
            self.count += 1
            self.first = self.first or error


def run(args) -> int:
    separator = args.key_separator.encode() if args.key_separator else None
    failures = _Failures()
    sent = 0
    try:
        with Producer(bootstrap_servers=args.bootstrap_server, acks=args.acks,
                      compression_type=args.compression, linger_ms=args.linger_ms,
                      max_block_ms=10_000) as producer:
            for number, line in enumerate(sys.stdin.buffer, 1):
                value = line[:-1] if line.endswith(b"\n") else line
                key = None
                if separator is not None:
                    key, found, value = value.partition(separator)
                    if not found:
                        print(f"klog: line {number} has no key separator "
                              f"{args.key_separator!r}", file=sys.stderr)
                        return 1
                producer.send(args.topic, value, key=key,
                              partition=args.partition).add_done_callback(failures)
                sent += 1
    except (KlogError, ValueError, TypeError) as exc:
        print(f"klog: {exc}", file=sys.stderr)
        return 1
    if failures.count:
        print(f"klog: {failures.count} of {sent} message(s) failed: {failures.first}",
              file=sys.stderr)
        return 1
    return 0
