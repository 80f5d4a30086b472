"""Microseconds per Produce request in the codec alone: the hand-compiled codecs
(klog.protocol.produce_codec for v3-8, produce_flex for v9-10) against the interpreted one,
the reference, in the same run.

For v8 (what older clients send) and v10 (librdkafka and klog's client; kafka-python sends
v9, the same path), requests of 1 and 4 partitions (one topic, a 1 KiB batch each):

- server side: read the request from its frame + write the answer (base offsets, no errors);
- client side: write the request + read the answer.

Figures: best of several rounds of many repetitions, µs per request, one core; the codecs'
outputs are checked equal before timing. No assertions beyond that: figures only.

Run: ``.venv/bin/python perf/bench_produce_codec.py [--rounds N] [--number N]``
"""

from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from klog.protocol.apis import produce  # noqa: E402
from klog.protocol.chunks import ChunkWriter, join_chunks  # noqa: E402
from klog.protocol.codec import compile_struct  # noqa: E402

BATCH = bytes(range(256)) * 4  # 1 KiB, stands for a record batch (opaque to the codec)


def bodies(partitions: int) -> tuple:
    request = produce.Request(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        produce.TopicProduceData(name="bench-topic", partition_data=[
            produce.PartitionProduceData(index=i, records=BATCH) for i in range(partitions)])])
    response = produce.Response(responses=[produce.TopicProduceResponse(
        name="bench-topic", partition_responses=[
            produce.PartitionProduceResponse(index=i, base_offset=1000 * i + 7,
                                             log_start_offset=0)
            for i in range(partitions)])])
    return request, response


def encode(codec, body) -> bytes:
    out = ChunkWriter(size_prefix=False)
    codec.write(out, body)
    return join_chunks(out.finish())


def measure(request_codec, response_codec, request, response, rounds: int, number: int):
    request_frame = memoryview(encode(request_codec, request))
    response_frame = memoryview(encode(response_codec, response))
    read_request, write_request = request_codec.read, request_codec.write
    read_response, write_response = response_codec.read, response_codec.write

    def server() -> None:
        read_request(request_frame, 0)
        write_response(ChunkWriter(size_prefix=False), response)

    def client() -> None:
        write_request(ChunkWriter(size_prefix=False), request)
        read_response(response_frame, 0)

    return tuple(min(timeit.repeat(f, number=number, repeat=rounds)) / number * 1e6
                 for f in (server, client))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--number", type=int, default=5000)
    args = parser.parse_args()
    print(f"{'version':>7} {'parts':>5} {'side':>6} {'interpreted':>12} {'compiled':>9} "
          f"{'speed-up':>8}   (µs per request)")
    for version in (8, 10):
        flexible = version >= 9
        fast = (produce.Request.codec(version, flexible), produce.Response.codec(version, flexible))
        reference = (compile_struct(produce.Request, version, flexible),
                     compile_struct(produce.Response, version, flexible))
        assert fast[0].read is not reference[0].read, f"v{version}: nothing installed"
        for partitions in (1, 4):
            request, response = bodies(partitions)
            for codec, slow in zip(fast, reference):  # the same bytes and objects first
                body = request if codec is fast[0] else response
                data = encode(slow, body)
                assert encode(codec, body) == data
                assert codec.read(memoryview(data), 0) == slow.read(memoryview(data), 0)
            before = measure(*reference, request, response, args.rounds, args.number)
            after = measure(*fast, request, response, args.rounds, args.number)
            for side, slow, quick in zip(("server", "client"), before, after):
                print(f"{version:>7} {partitions:>5} {side:>6} {slow:>12.2f} {quick:>9.2f} "
                      f"{slow / quick:>7.1f}x")


if __name__ == "__main__":
    main()
