"""Cluster mode: appliances on several hosts form one Kafka cluster through ZooKeeper.

One ZooKeeper session per appliance, held by its supervisor (kazoo only in `session`). This
package never imports the appliance: the supervisor drives it and turns what it reads into
the workers' terms.

**Identity.** Every worker is a Kafka node: node id = broker.id * 100 + worker index
(`placement.NODES_PER_APPLIANCE`), so an appliance (broker.id) is a failure domain of up to
100 nodes, one per disk.

**The ZooKeeper layout** (under the chroot of `zookeeper.connect`, created when missing);
Kafka's own paths and JSON, so Kafka's tools can read them:

| path | kind | content |
| --- | --- | --- |
| `/cluster/id` | persistent | `{"version":"1","id":"<22-char base64 uuid>"}`, made by the first appliance |
| `/controller` | ephemeral | `{"version":1,"brokerid":<broker.id>,"timestamp":"..."}`: the controlling appliance |
| `/controller_epoch` | persistent | the controller epoch as text; bumped in the same multi that creates `/controller` |
| `/brokers/ids/<node>` | ephemeral | Kafka's v5 registration: host, port, endpoints, rack; one per serving worker |
| `/brokers/topics/<t>` | persistent | `{"version":2,"partitions":{"0":[101,201]},"adding_replicas":{},"removing_replicas":{}}`; while partition p moves (KIP-455), `partitions[p]` is its target followed by the original replicas not in it, `adding_replicas[p]` the target's new replicas, `removing_replicas[p]` the original ones it drops (`reassignment.py`) |
| `/brokers/topics/<t>/partitions/<p>/state` | persistent | `{"version":1,"leader":101,"leader_epoch":0,"isr":[101,201],"controller_epoch":3}`, written with a conditional set by the controller (leaders, dead nodes out of the ISR) and by the leader's appliance (ISR changes, `isr.py`), each write in one multi with its note in `/klog/state_changes` |
| `/config/topics/<t>` | persistent | `{"version":1,"config":{...}}`: the topic's overrides |
| `/admin/delete_topics/<t>` | persistent | a request to delete `t`, carried out by the controller |
| `/admin/preferred_replica_election` | persistent | Kafka's request `{"version":1,"partitions":[{"topic":t,"partition":p}]}`: move these to their preferred replica; removed by the controller when done (`preferred.py`) |
| `/admin/reassign_partitions` | persistent | `{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[101,401]}]}`: target replicas, written by `klog cluster reassign --execute`; the controller takes it up into the topics' assignments and deletes it |
| `/config/brokers/<node>` | persistent | `{"version":1,"config":{...}}`: a node's dynamic configs, today the replication throttle (`leader.replication.throttled.rate`, `follower.replication.throttled.rate`, bytes/s); the topic side (`leader.replication.throttled.replicas`, `follower.replication.throttled.replicas`) is in `/config/topics/<t>` |
| `/latest_producer_id_block` | persistent | Kafka's block of producer ids last handed out (conditional set) |
| `/config/users/<name>` | persistent | Kafka's SCRAM credentials `{"version":1,"config":{"SCRAM-SHA-512":"salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=4096"}}`; no world READ with `zookeeper.set.acl` (`security_znodes.py`, `security_store.py`) |
| `/config/changes/config_change_<seq>` | persistent sequential | `{"version":2,"entity_path":"users/<name>"}` after a user changed |
| `/kafka-acl/<Type>/<name>`, `/kafka-acl-extended/prefixed/<Type>/<name>` | persistent | Kafka's ACLs of a LITERAL, PREFIXED resource: `{"version":1,"acls":[{"principal","permissionType","operation","host"}]}` |
| `/kafka-acl-changes/acl_changes_<seq>`, `/kafka-acl-extended-changes/acl_changes_<seq>` | persistent sequential | `TOPIC:<name>`, resp. `{"version":1,"resourceType","name","patternType"}` after a resource's ACLs changed |
| `/klog/appliances/<broker.id>` | ephemeral | klog's own: the appliance (rack, host) as one failure domain |
| `/klog/controlled_shutdown/<broker.id>` | ephemeral | klog's own: the appliance asks the controller to move leadership away before it stops (`shutdown.py`) |
| `/klog/state_changes/change-<seq>` | persistent sequential | klog's own: `{"version":1,"states":[["<state path>",<version>,"<state JSON>"]]}`: the partition states written by one multi, created in that multi; appliances follow the states by these notes, not by watches on each state; the newest 200 are kept (`state_changes.py`) |

**Security.** Every supervisor follows the users and ACLs through the change notifications
(`security_store.py`) and tells its workers; any appliance, `klog users` and `klog acls` write
them. With `zookeeper.set.acl` every znode created carries ACLs (`session.ZnodeAcls`).

**Rules.** Any appliance may create a topic (assignment and config in one multi) or ask for
a deletion, as Kafka's admin client did, and the command may ask for a reassignment and set
throttles; only the elected controller elects leaders and carries out deletions and
reassignments, and every one of its writes is a multi that first checks the version of
`/controller_epoch` it was elected with, so a deposed controller (paused, partitioned,
expired) can no longer write. A leader's appliance changes only its partition's ISR, with a
version check that a new election defeats (`isr.py`). Leaders come from the ISR only, unless
a topic enables unclean election; never from an appliance in a controlled shutdown
(`leadership.py`).
"""
