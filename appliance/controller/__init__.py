"""The appliance's controller: the one place that decides about topics, and how workers ask it.

Two sides, and workers see only one of them:

- the **decisions**, run by the supervisor: `decisions` (`ApplianceController`: create,
  delete, validate), `placement` (which worker, i.e. disk, owns a new partition: a pure
  function), `catalog` (the topics on disk, producer id blocks, the cluster id), and `server`
  (the supervisor's end of the control channels, broadcasting every change);
- the **workers' side**: `interface` (`Controller`, the typed protocol of what a worker may
  ask), `client` (`ControllerClient`, its implementation over the control channel), `channel`
  (the messages and their framing) and `topics` (`TopicInfo`, `TopicResult`, the rule that
  turns a topic's configs into its `LogConfig`).

Import contracts in pyproject.toml keep the workers off the decisions side.
"""
