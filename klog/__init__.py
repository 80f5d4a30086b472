"""klog: a Kafka-compatible log broker and its Python client library."""
