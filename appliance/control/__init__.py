"""The appliance's control plane: the one place that decides about topics, and how workers ask.

("Controller" means only the fleet's elected controller, `cluster/controller.py`.) Two sides,
and workers see only one of them:

- the **decisions**, run by the supervisor: `decisions` (`LocalDecider`: an appliance alone
  creates, deletes and validates topics itself), `fleet` (`FleetRelay`: in a fleet, passes those
  requests on to the fleet's controller and follows what it decided), `placement` (which worker,
  i.e. disk, owns a new partition: a pure function), `catalog` (the topics on disk, producer id
  blocks, the cluster id), and `server` (the supervisor's end of the control channels,
  broadcasting every change);
- the **workers' side**: `interface` (`ControlPlane`, the typed protocol of what a worker may
  ask), `client` (`ControlPlaneClient`, its implementation over the control channel), `channel`
  (the messages and their framing) and `topics` (`TopicInfo`, `TopicResult`, the rule that
  turns a topic's configs into its `LogConfig`).

Import contracts in pyproject.toml keep the workers off the decisions side.
"""
