"""The producer: sans-IO state (accumulator, partitioner, sequences, protocol) and the
blocking `Producer` over it. `klog.aio.AIOProducer` drives the same state from asyncio."""

from klog.producer.blocking import Producer
from klog.producer.futures import FutureRecordMetadata, FutureRecordMetadataList

__all__ = ["FutureRecordMetadata", "FutureRecordMetadataList", "Producer"]
