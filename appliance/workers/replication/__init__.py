"""Replication, and every replica's state: the package a worker's partitions live in.

- `partition.py`: `Partition`, one replica held here: its log, producers, role, high
  watermark and acks=all waiters, with each operation as a method that does its own
  bookkeeping (producer state, shm, waiters).
- `replicas.py`: `LocalReplicas`, the partitions this worker holds (open, close, delete).
- `manager.py`: `ReplicaManager`, which applies the controller's roles, asks ISR changes,
  watches followers' lag and writes the high-watermark checkpoints.
- `fetcher.py` and `link.py`: a follower's fetcher per leader node and its connection;
  `throttle.py`: a reassignment's throttle on them.
- `role.py`, `acks.py`, `producer_state.py`, `waiters.py`, `checkpoints.py`: the parts of a
  partition's state, each with its own rules.
- `context.py`: `ReplicaContext`, all this package may use of its worker.

Rules (import contracts in pyproject.toml): nothing here imports the worker, its
connections or its handlers, nor `cluster`; the fleet is reached through the control
channel only. Event loop only.
"""
