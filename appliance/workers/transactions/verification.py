"""A partition leader's questions to transaction coordinators (KIP-890's first part, Kafka's
AddPartitionsToTxnManager): is this partition in this producer's ongoing transaction?

Asked before a transactional batch may start a transaction on a partition, so that a delayed
or retried Produce after its transaction ended, or one from a producer that never called
AddPartitionsToTxn, cannot open a transaction no marker will close (a "hanging" one, which
holds the last stable offset and every read_committed consumer back for ever).

How it travels: AddPartitionsToTxn v4 with ``verify_only`` to the leader of the id's partition
of ``__transaction_state``, over the inter-broker listener with its TLS and SASL, on one
connection per coordinator node (`ReplicaLink`, as the markers go). One request per node is in
flight; the questions that arrive meanwhile (any transactional ids) wait and leave together in
the next one, so a busy leader sends one request per round trip, not one per produce (two
questions of one producer merge: see `_ask`). A
coordinator that is this very worker is asked in-process (the same answer, without the hop).

What a question can come back with, as Kafka maps it (the produce handler maps further,
`produce_error`): each partition's code, PRODUCER_FENCED as INVALID_PRODUCER_EPOCH and
TRANSACTION_ABORTABLE as INVALID_TXN_STATE; a connection that fails or times out
NETWORK_EXCEPTION for every question of the request; a top-level CLUSTER_AUTHORIZATION_FAILED
(this broker's principal lacks ClusterAction there) INVALID_TXN_STATE; a coordinator that does
not know v4 (UNSUPPORTED_VERSION) means no verification is possible: the batch is appended, as
Kafka does. Nothing is cached: every question is asked.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from dataclasses import dataclass, field

from appliance.workers.replication.link import ReplicaLink
from appliance.workers.transactions.state import TxnError
from appliance.workers.transactions.txn_log import TRANSACTION_TOPIC, partition_for
from klog.protocol.apis import add_partitions_to_txn as api
from klog.protocol.error_codes import ErrorCode

log = logging.getLogger(__name__)

VERSION = 4  # KIP-890's first part; v5 only adds TRANSACTION_ABORTABLE
TIMEOUT_S = 30.0  # Kafka's request.timeout.ms
RETRIABLE = frozenset({ErrorCode.NETWORK_EXCEPTION, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                       ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
                       ErrorCode.CONCURRENT_TRANSACTIONS})

Partitions = list[tuple[str, int]]
Errors = dict[tuple[str, int], ErrorCode]


def produce_error(code: ErrorCode) -> tuple[ErrorCode, str | None]:
    """What a Produce partition is answered for a failed verification (Kafka's
    ReplicaManager): a partition not in the transaction INVALID_TXN_STATE; a coordinator that
    could not answer NOT_ENOUGH_REPLICAS, retriable and without a metadata refresh, which every
    client retries; anything else as it is."""
    if code == ErrorCode.INVALID_TXN_STATE:
        return code, "Partition was not added to the transaction"
    if code in RETRIABLE:
        return ErrorCode.NOT_ENOUGH_REPLICAS, ("Unable to verify the partition has been added "
                                               f"to the transaction. Underlying error: "
                                               f"{code.name}")
    return code, None


def _code(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:  # a code this klog does not know
        return ErrorCode.UNKNOWN_SERVER_ERROR


def _partition_code(code: int) -> ErrorCode:
    code = _code(code)
    if code == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if code == ErrorCode.TRANSACTION_ABORTABLE:
        return ErrorCode.INVALID_TXN_STATE
    return code


@dataclass
class _Question:
    """One transactional id's question in a node's next request, and the produces waiting on
    it (each with the partitions it asked about)."""

    transaction: api.AddPartitionsToTxnTransaction
    waiters: list[tuple[set, asyncio.Future]] = field(default_factory=list)

    def merge(self, partitions: Partitions) -> None:
        topics = {t.name: t for t in self.transaction.topics}
        for name, index in partitions:
            topic = topics.get(name)
            if topic is None:
                topic = topics[name] = api.AddPartitionsToTxnTopic(name=name, partitions=[])
                self.transaction.topics.append(topic)
            if index not in topic.partitions:
                topic.partitions.append(index)

    def settle(self, errors: Errors) -> None:
        for keys, future in self.waiters:
            _settle(future, {k: c for k, c in errors.items() if k in keys})


@dataclass
class _Node:
    """The questions waiting for one coordinator node's next request."""

    waiting: dict[str, _Question] = field(default_factory=dict)
    sending: bool = False


class TxnVerifier:
    """One worker's verifications; `verify` is all a produce needs."""

    def __init__(self, worker, security):
        self.worker = worker
        self.security = security
        self.links: dict[int, ReplicaLink] = {}
        self.nodes: dict[int, _Node] = defaultdict(_Node)
        self.sent = 0  # requests answered (tests, status)

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: Partitions) -> Errors:
        """The partitions that may not start the transaction, with why (empty: all may)."""
        try:
            node = self._coordinator(transactional_id)
        except TxnError as exc:
            return dict.fromkeys(partitions, exc.code)
        if node is None:  # this worker coordinates the id
            return self._ask_here(transactional_id, producer_id, producer_epoch, partitions)
        return await self._ask(node, api.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id,
            producer_epoch=producer_epoch, verify_only=True, topics=[
                api.AddPartitionsToTxnTopic(name=t, partitions=[i for n, i in partitions
                                                                if n == t])
                for t in dict.fromkeys(n for n, _ in partitions)]))

    def _coordinator(self, transactional_id: str):
        """The coordinator's node (None: this worker); TxnError when it has none now."""
        info = self.worker.control.topic(TRANSACTION_TOPIC)
        if info is None:  # no transaction ever began here
            raise TxnError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        partition = partition_for(transactional_id, info.partition_count)
        leader = self.worker.partition_leader(info, partition, self.security.listener)
        if leader is None:
            raise TxnError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return None if leader.node_id == self.worker.node_id else leader

    def _ask_here(self, transactional_id, producer_id, producer_epoch, partitions) -> Errors:
        try:
            errors = self.worker.transactions.verify_partitions(
                transactional_id, producer_id, producer_epoch, partitions,
                ErrorCode.INVALID_TXN_STATE)
        except TxnError as exc:
            errors = dict.fromkeys(partitions, exc.code)
        return {p: _partition_code(c) for p, c in errors.items() if c != ErrorCode.NONE}

    async def _ask(self, node, transaction) -> Errors:
        """Queue the question for ``node``'s next request. A second question of the same id
        waiting there: an older epoch's is answered INVALID_PRODUCER_EPOCH (Kafka's rule);
        the same epoch's partitions join the waiting one and both are answered by it (Kafka
        answers the earlier NETWORK_EXCEPTION, which makes its producer retry after a
        backoff: librdkafka's produce requests of two partitions of one transaction, a few
        ms apart, then cost each transaction 100 ms)."""
        queue = self.nodes[node.node_id]
        answer = asyncio.get_running_loop().create_future()
        keys = set(_all(transaction, ErrorCode.NONE))
        earlier = queue.waiting.get(transaction.transactional_id)
        if earlier is not None:
            if earlier.transaction.producer_epoch > transaction.producer_epoch:
                return _all(transaction, ErrorCode.INVALID_PRODUCER_EPOCH)
            if earlier.transaction.producer_epoch == transaction.producer_epoch and \
                    earlier.transaction.producer_id == transaction.producer_id:
                earlier.merge(sorted(keys))
                earlier.waiters.append((keys, answer))
                return await answer
            code = (ErrorCode.NETWORK_EXCEPTION if earlier.transaction.producer_epoch
                    == transaction.producer_epoch else ErrorCode.INVALID_PRODUCER_EPOCH)
            earlier.settle(_all(earlier.transaction, code))
        question = queue.waiting[transaction.transactional_id] = _Question(transaction)
        question.waiters.append((keys, answer))
        if not queue.sending:
            queue.sending = True
            asyncio.ensure_future(self._send_while_waiting(node, queue))
        return await answer

    async def _send_while_waiting(self, node, queue: _Node) -> None:
        """Send what waits for ``node``, request after request, until nothing does; every
        question taken is answered, whatever happens (a produce must never wait for ever)."""
        try:
            while queue.waiting:
                questions, queue.waiting = queue.waiting, {}
                try:
                    answers = await self._send(node, [q.transaction for q in
                                                      questions.values()])
                except Exception:
                    log.exception("verifying transactions with node %d failed", node.node_id)
                    answers = {t: _all(q.transaction, ErrorCode.NETWORK_EXCEPTION)
                               for t, q in questions.items()}
                for transactional_id, question in questions.items():
                    question.settle(answers.get(transactional_id, {}))
        finally:
            queue.sending = False

    async def _send(self, node, transactions) -> dict[str, Errors]:
        """One request to ``node``: each transactional id's failed partitions."""
        try:
            link = self.links.get(node.node_id)
            if link is None:
                link = await ReplicaLink.open(node.host, node.port, node.node_id,
                                              timeout_s=5, security=self.security)
                self.links[node.node_id] = link
            answer = await link.ask(api.SPEC.key, VERSION,
                                    api.Request(transactions=transactions),
                                    timeout_s=TIMEOUT_S)
        except Exception as exc:  # unreachable, closed, timed out
            log.warning("cannot verify transactions with coordinator node %d: %r",
                        node.node_id, exc)
            dropped = self.links.pop(node.node_id, None)
            if dropped is not None:
                dropped.abort()
            return {t.transactional_id: _all(t, ErrorCode.NETWORK_EXCEPTION)
                    for t in transactions}
        self.sent += 1
        top = _code(answer.error_code)
        if top == ErrorCode.UNSUPPORTED_VERSION:
            log.warning("coordinator node %d does not serve AddPartitionsToTxn v%d: "
                        "transactional batches are appended unverified", node.node_id, VERSION)
            return {}
        if top != ErrorCode.NONE:
            code = (ErrorCode.INVALID_TXN_STATE if top == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                    else top)
            log.error("coordinator node %d refused to verify transactions: %s", node.node_id,
                      top.name)
            return {t.transactional_id: _all(t, code) for t in transactions}
        return {result.transactional_id: {
            (topic.name, p.partition_index): _partition_code(p.partition_error_code)
            for topic in result.topic_results for p in topic.results_by_partition
            if p.partition_error_code != 0} for result in answer.results_by_transaction}

    def close(self) -> None:
        for link in self.links.values():
            link.abort()
        self.links.clear()


def _all(transaction, code: ErrorCode) -> Errors:
    return {(t.name, p): code for t in transaction.topics for p in t.partitions}


def _settle(future: asyncio.Future, errors: Errors) -> None:
    if not future.done():
        future.set_result(errors)
