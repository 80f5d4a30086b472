"""The worker process: serves the Kafka protocol for the partitions it owns."""
