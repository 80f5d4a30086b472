"""Kafka's client quotas (KIP-13, KIP-55, KIP-124, KIP-257): entities, their values, the
store they live in, and the sampled rates a worker enforces them with."""
