"""Authorization: Kafka's ACLs (the bindings, the pure decision, their file)."""
