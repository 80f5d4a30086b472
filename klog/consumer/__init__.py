"""The consumer: sans-IO state (positions, lookups, fetch planning, decoding, consumer groups
in `klog.consumer.group` with the assignors) and the blocking `Consumer` over it.
`klog.aio.AIOConsumer` drives the same state from asyncio."""

from klog.consumer.blocking import Consumer

__all__ = ["Consumer"]
