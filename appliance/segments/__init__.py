"""The storage engine: partition logs of segment files (Kafka's on-disk layout)."""
