"""klog's asyncio client: the same API as `klog.Producer` and `klog.Consumer`, with coroutines
where those wait, over the very same sans-IO protocol objects.

Example::

    import klog, klog.aio

    async def main():
        async with klog.aio.AIOProducer(bootstrap_servers="127.0.0.1:9092") as producer:
            await (await producer.send("clicks", b"hello"))
        async with klog.aio.AIOConsumer(bootstrap_servers="127.0.0.1:9092",
                                        auto_offset_reset="earliest") as consumer:
            consumer.assign([klog.TopicPartition("clicks", 0)])
            print(await consumer.poll(timeout_ms=1000))
"""

from klog.aio.consumer import AIOConsumer
from klog.aio.producer import AIOFutureRecordMetadata, AIOFutureRecordMetadataList, AIOProducer

__all__ = ["AIOConsumer", "AIOFutureRecordMetadata", "AIOFutureRecordMetadataList",
           "AIOProducer"]
