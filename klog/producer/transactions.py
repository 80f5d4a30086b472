"""The transactional producer's state machine (KIP-98, KIP-360, KIP-447). Sans-IO, pure.

`ProducerProtocol` owns one of these when the producer has a ``transactional_id``; it asks
it for coordinator requests in its ``poll`` and hands it their answers. The user's calls
(``init``, ``begin``, ``send_offsets``, ``commit``, ``abort``) change the state and return a
future (made by the I/O flavour's factory) that the answers resolve.

States, as Kafka's client: UNINITIALIZED -> INITIALIZING -> READY -> IN_TRANSACTION ->
COMMITTING or ABORTING -> READY; ABORTABLE_ERROR (only abort leaves it) and FATAL_ERROR
(only close). The coordinator's requests go one at a time, in order (Kafka's client does the
same): FindCoordinator (key type 1) whenever the coordinator is unknown or moved,
InitProducerId, AddPartitionsToTxn before the first batch of each new partition (batches of
a partition not yet added wait in the accumulator: `drain`'s ``allowed``), AddOffsetsToTxn
then TxnOffsetCommit to the group's coordinator, EndTxn once every batch of the transaction
is answered (``idle``). A transaction that added nothing ends without an EndTxn.

Errors are sorted into what the caller must do: retriable ones (CONCURRENT_TRANSACTIONS,
COORDINATOR_LOAD_IN_PROGRESS, a lost request) are retried after ``retry_backoff_ms``,
NOT_COORDINATOR finds the coordinator again; fencing (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH,
TRANSACTIONAL_ID_AUTHORIZATION_FAILED) is fatal (ProducerFencedError: close); a batch
refused for good, an authorization refusal or a TxnOffsetCommit from an old generation makes
the transaction abortable (TransactionAbortableError: abort, then retry). A batch that failed
after it was stamped leaves a sequence gap: after the abort, InitProducerId with the current
producer id and epoch bumps the epoch (KIP-360), which restarts the sequences.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from klog.errors import (
    KlogError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionFatalError,
    TransactionStateError,
    error_for,
)
from klog.outgoing import Outgoing
from klog.producer.sequences import Sequences
from klog.producer.txn_offsets import txn_offset_commit_errors, txn_offset_commit_request
from klog.protocol.apis import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    end_txn,
    find_coordinator,
    init_producer_id,
)
from klog.protocol.error_codes import ErrorCode

log = logging.getLogger("klog.producer")

UNINITIALIZED = "UNINITIALIZED"
INITIALIZING = "INITIALIZING"
READY = "READY"
IN_TRANSACTION = "IN_TRANSACTION"
COMMITTING = "COMMITTING"
ABORTING = "ABORTING"
ABORTABLE_ERROR = "ABORTABLE_ERROR"
FATAL_ERROR = "FATAL_ERROR"

GROUP_KEY_TYPE, TXN_KEY_TYPE = 0, 1
TXN = None  # a step's target: the transaction coordinator (else a group id)

FENCED = frozenset({
    ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ErrorCode.TRANSACTION_COORDINATOR_FENCED,
})  # fmt: skip
MOVED = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})
RETRY = frozenset({
    ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION, ErrorCode.OPERATION_NOT_ATTEMPTED,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_LEADER_EPOCH,
})  # fmt: skip
ABORTABLE = frozenset({
    ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ErrorCode.UNKNOWN_PRODUCER_ID, ErrorCode.INVALID_PRODUCER_ID_MAPPING,
    ErrorCode.TRANSACTION_ABORTABLE, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION,
    ErrorCode.FENCED_INSTANCE_ID, ErrorCode.REBALANCE_IN_PROGRESS,
})  # fmt: skip
CONCURRENT_BACKOFF_MS = 20  # Kafka's client retries CONCURRENT_TRANSACTIONS this soon


class Step:
    """One coordinator request to make, in order, and the future waiting for it."""

    __slots__ = ("kind", "target", "result", "committed", "group", "offsets")

    def __init__(self, kind: str, result: Any, target: str | None = TXN, *,
                 committed: bool = False, group=None, offsets=None):
        self.kind = kind  # "init", "bump", "add_offsets", "txn_offset_commit", "end"
        self.target = target  # TXN or the group id whose coordinator takes it
        self.result = result
        self.committed = committed
        self.group = group  # the ConsumerGroupMetadata of send_offsets
        self.offsets = offsets  # {(topic, partition): (offset, leader_epoch, metadata)}


class TransactionManager:
    def __init__(self, config, sequences: Sequences, new_future: Callable[[], Any]):
        self.transactional_id: str = config.transactional_id
        self.timeout_ms: int = config.transaction_timeout_ms
        self.retry_backoff_ms: int = config.retry_backoff_ms
        self.sequences = sequences
        sequences.transactional = True
        self._new_future = new_future
        self.state = UNINITIALIZED
        self.error: KlogError | None = None  # why ABORTABLE_ERROR or FATAL_ERROR
        self.coordinators: dict[str | None, tuple[int, tuple[str, int]]] = {}
        self.added: set[tuple[str, int]] = set()  # partitions in the transaction
        self.started = False  # the coordinator has the transaction: EndTxn is due
        self._needs_bump = False
        self._steps: deque[Step] = deque()
        self._in_flight: Outgoing | None = None
        self._retry_at_ms = 0

    # the user's side (under the I/O layer's lock) -----------------------------------------

    def init(self) -> Any:
        """Start InitProducerId; returns the future it resolves (the pending one when
        called again after a timeout)."""
        self._check_not_fatal()
        if self.state == INITIALIZING:
            return self._pending("init")
        if self.state != UNINITIALIZED:
            raise TransactionStateError(f"init_transactions() in state {self.state}: it is "
                                        "called once, before the first transaction")
        self.state = INITIALIZING
        return self._queue(Step("init", self._new_future()))

    def begin(self) -> None:
        self._check_not_fatal()
        if self.state != READY:
            raise self._state_error("begin_transaction()")
        self.state = IN_TRANSACTION
        self.added.clear()
        self.started = False

    def send_offsets(self, offsets: dict, group) -> Any:
        """AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator."""
        self._check_sending("send_offsets_to_transaction()")
        return self._queue(Step("add_offsets", self._new_future(), TXN, group=group,
                                offsets=offsets))

    def commit(self) -> Any:
        self._check_not_fatal()
        if self.state == COMMITTING:
            return self._pending("end")
        if self.state == ABORTABLE_ERROR:
            raise TransactionAbortableError(
                f"the transaction cannot commit ({self.error}): abort_transaction() and retry",
                self.error)
        if self.state != IN_TRANSACTION:
            raise self._state_error("commit_transaction()")
        self.state = COMMITTING
        return self._queue(Step("end", self._new_future(), committed=True))

    def abort(self) -> Any:
        """Start the abort (the protocol fails the batches not yet sent); None when there is
        no transaction to abort."""
        self._check_not_fatal()
        if self.state == ABORTING:
            return self._pending("end")
        if self.state == READY:
            return None
        if self.state not in (IN_TRANSACTION, ABORTABLE_ERROR, COMMITTING):
            raise self._state_error("abort_transaction()")
        if self.state == COMMITTING:  # a commit that failed abortably: it is over
            for step in list(self._steps):
                if step.kind == "end":
                    self._steps.remove(step)
        self.state = ABORTING
        return self._queue(Step("end", self._new_future(), committed=False))

    def check_send(self) -> None:
        """send() is allowed only inside a transaction."""
        if self.state != IN_TRANSACTION:
            self._check_sending("send()")

    @property
    def drops_unsent(self) -> bool:
        """Batches not yet sent belong to a transaction that will not commit: fail them."""
        return self.state in (ABORTING, ABORTABLE_ERROR, FATAL_ERROR)

    def fail_all(self, error: BaseException) -> None:
        """The producer closes: every waiting call fails."""
        for step in self._steps:
            _fail_future(step.result, error)
        self._steps.clear()

    # what the protocol reports -------------------------------------------------------------

    def batch_failed(self, batch, error: BaseException) -> None:
        """A batch of the transaction failed for good: the transaction is doomed, and a
        stamped batch leaves a sequence gap that only an epoch bump closes."""
        if batch.base_sequence >= 0:
            self._needs_bump = True
        if isinstance(error, ProducerFencedError):
            self._fatal(error)
        elif self.state in (IN_TRANSACTION, COMMITTING):
            self._abortable(error)

    def unsent_dropped(self, batch) -> None:
        if batch.base_sequence >= 0:
            self._needs_bump = True

    # the sender's side --------------------------------------------------------------------

    def address_of(self, node: int) -> tuple[str, int] | None:
        for found, address in self.coordinators.values():
            if found == node:
                return address
        return None

    def allowed(self) -> set[tuple[str, int]]:
        return self.added

    def poll(self, now_ms: int, queued: Iterable[tuple[str, int]], idle: bool
             ) -> list[Outgoing]:
        """The next coordinator request, if one is due: ``queued`` are the partitions with
        batches waiting, ``idle`` says no batch is unanswered (EndTxn may go)."""
        if self._in_flight is not None or now_ms < self._retry_at_ms:
            return []
        if self.state in (IN_TRANSACTION, COMMITTING):
            new = sorted(key for key in queued if key not in self.added)
            if new and TXN not in self.coordinators:
                return self._find(TXN)
            if new:
                return self._send(TXN, add_partitions_to_txn,
                                  self._add_partitions_request(new), ("add_partitions", new))
        if not self._steps:
            return []
        step = self._steps[0]
        if step.kind == "end" and not idle:
            return []
        if step.kind == "end" and not self.started:
            self._steps.popleft()  # nothing reached the coordinator: nothing to end
            self._ended(step)
            return []
        if step.target not in self.coordinators:
            return self._find(step.target)
        return self._send(step.target, *self._request_for(step), step)

    def next_poll_ms(self, now_ms: int) -> int | None:
        """The end of a backoff; otherwise poll has sent what it could, and the next answer
        (or the user's next call, which wakes the I/O layer) brings more work."""
        if self._in_flight is None and self._retry_at_ms > now_ms:
            return self._retry_at_ms
        return None

    def _send(self, target, api, body, context) -> list[Outgoing]:
        node = self.coordinators[target][0]
        self._in_flight = Outgoing(node, api, body, context=context)
        return [self._in_flight]

    def _find(self, target: str | None) -> list[Outgoing]:
        key, key_type = ((self.transactional_id, TXN_KEY_TYPE) if target is TXN
                         else (target, GROUP_KEY_TYPE))
        self._in_flight = Outgoing(None, find_coordinator, find_coordinator.Request(
            key=key, key_type=key_type), context=("find", target))
        return [self._in_flight]

    def _add_partitions_request(self, keys: list[tuple[str, int]]):
        topics: dict[str, list[int]] = {}
        for topic, partition in keys:
            topics.setdefault(topic, []).append(partition)
        seq = self.sequences
        return add_partitions_to_txn.Request(
            v3_and_below_transactional_id=self.transactional_id,
            v3_and_below_producer_id=seq.producer_id,
            v3_and_below_producer_epoch=seq.producer_epoch,
            v3_and_below_topics=[add_partitions_to_txn.AddPartitionsToTxnTopic(
                name=name, partitions=parts) for name, parts in topics.items()])

    def _request_for(self, step: Step):
        seq = self.sequences
        if step.kind in ("init", "bump"):
            bump = step.kind == "bump"
            return init_producer_id, init_producer_id.Request(
                transactional_id=self.transactional_id, transaction_timeout_ms=self.timeout_ms,
                producer_id=seq.producer_id if bump else -1,
                producer_epoch=seq.producer_epoch if bump else -1)
        if step.kind == "add_offsets":
            return add_offsets_to_txn, add_offsets_to_txn.Request(
                transactional_id=self.transactional_id, producer_id=seq.producer_id,
                producer_epoch=seq.producer_epoch, group_id=step.group.group_id)
        if step.kind == "txn_offset_commit":
            return txn_offset_commit_request(self.transactional_id, seq.producer_id,
                                             seq.producer_epoch, step.group, step.offsets)
        return end_txn, end_txn.Request(
            transactional_id=self.transactional_id, producer_id=seq.producer_id,
            producer_epoch=seq.producer_epoch, committed=step.committed)

    # answers ------------------------------------------------------------------------------

    def on_response(self, request: Outgoing, response, now_ms: int) -> None:
        self._in_flight = None
        context = request.context
        if isinstance(context, tuple) and context[0] == "find":
            self._on_found(context[1], response, now_ms)
        elif isinstance(context, tuple):
            self._on_add_partitions(context[1], response, now_ms)
        elif context.kind in ("init", "bump"):
            self._on_init(context, response, now_ms)
        elif context.kind == "txn_offset_commit":
            self._on_step_code(context, txn_offset_commit_errors(response), now_ms)
        else:
            self._on_step_code(context, [ErrorCode(response.error_code)], now_ms)

    def on_failure(self, request: Outgoing, error: KlogError, now_ms: int) -> None:
        """Lost: find the coordinator again (it may have moved), after a backoff."""
        self._in_flight = None
        context = request.context
        target = context[1] if isinstance(context, tuple) and context[0] == "find" else (
            TXN if isinstance(context, tuple) else context.target)
        self.coordinators.pop(target, None)
        self._retry_at_ms = now_ms + self.retry_backoff_ms
        log.info("transactional id %r: a coordinator request was lost (%s); retrying",
                 self.transactional_id, error)

    def _on_found(self, target, response, now_ms: int) -> None:
        code = ErrorCode(response.error_code)
        if code == ErrorCode.NONE:
            self.coordinators[target] = (response.node_id, (response.host, response.port))
            log.info("transactional id %r: %s coordinator is node %d", self.transactional_id,
                     "the transaction" if target is TXN else f"group {target!r}'s",
                     response.node_id)
        elif code.retriable:
            self._retry_at_ms = now_ms + self.retry_backoff_ms
        elif code in FENCED:
            self._fatal(error_for(code, response.error_message or None))
        elif self._steps:
            self._fail_step(self._steps[0], code, response.error_message or None)

    def _on_init(self, step: Step, response, now_ms: int) -> None:
        code = ErrorCode(response.error_code)
        if code == ErrorCode.NONE:
            self._steps.popleft()
            self.sequences.set_producer_id(response.producer_id, response.producer_epoch)
            self._needs_bump = False
            log.info("transactional id %r: producer id %d, epoch %d", self.transactional_id,
                     response.producer_id, response.producer_epoch)
            self.state = READY
            _done(step.result)
            return
        self._retry_or_fail(step, code, now_ms)

    def _on_add_partitions(self, keys: list[tuple[str, int]], response, now_ms: int) -> None:
        codes = {}
        for topic in response.results_by_topic_v3_and_below:
            for part in topic.results_by_partition:
                codes[(topic.name, part.partition_index)] = ErrorCode(part.partition_error_code)
        worst = ErrorCode.NONE
        for key in keys:
            code = codes.get(key, ErrorCode.OPERATION_NOT_ATTEMPTED)
            if code == ErrorCode.NONE:
                self.added.add(key)
                self.started = True
            elif worst == ErrorCode.NONE or code not in RETRY and code not in MOVED:
                worst = code
        if worst == ErrorCode.NONE:
            return
        if worst in MOVED:
            self.coordinators.pop(TXN, None)
        if worst in MOVED or worst in RETRY:
            self._retry_at_ms = now_ms + (CONCURRENT_BACKOFF_MS if worst ==
                                          ErrorCode.CONCURRENT_TRANSACTIONS
                                          else self.retry_backoff_ms)
        elif worst in FENCED:
            self._fatal(error_for(worst, "AddPartitionsToTxn"))
        else:
            self._abortable(error_for(worst, "AddPartitionsToTxn"))

    def _on_step_code(self, step: Step, codes: list[ErrorCode], now_ms: int) -> None:
        bad = [c for c in codes if c != ErrorCode.NONE]
        if not bad:
            self._steps.popleft()
            if step.kind == "add_offsets":
                self.started = True
                self._steps.appendleft(Step("txn_offset_commit", step.result,
                                            step.group.group_id, group=step.group,
                                            offsets=step.offsets))
            elif step.kind == "txn_offset_commit":
                _done(step.result)
            else:
                self._ended(step)
            return
        worst = next((c for c in bad if c not in RETRY and c not in MOVED), bad[0])
        self._retry_or_fail(step, worst, now_ms)

    def _retry_or_fail(self, step: Step, code: ErrorCode, now_ms: int) -> None:
        if code in MOVED:
            self.coordinators.pop(step.target, None)
            self._retry_at_ms = now_ms + self.retry_backoff_ms
        elif code in RETRY or (code.retriable and code not in FENCED):
            self._retry_at_ms = now_ms + (CONCURRENT_BACKOFF_MS if code ==
                                          ErrorCode.CONCURRENT_TRANSACTIONS
                                          else self.retry_backoff_ms)
        else:
            self._fail_step(step, code, None)

    def _fail_step(self, step: Step, code: ErrorCode, message: str | None) -> None:
        what = {"init": "InitProducerId", "bump": "InitProducerId", "end": "EndTxn",
                "add_offsets": "AddOffsetsToTxn",
                "txn_offset_commit": "TxnOffsetCommit"}[step.kind]
        error = error_for(code, f"{what}{': ' + message if message else ''}")
        if code in FENCED or step.kind in ("init", "bump", "end") or code not in ABORTABLE:
            self._fatal(error)
        else:
            self._steps.popleft()
            self._abortable(error)
            _fail_future(step.result, TransactionAbortableError(
                f"{what} failed ({error}): abort_transaction() and retry", error))

    def _ended(self, step: Step) -> None:
        """EndTxn answered (or not needed): READY again, unless the epoch must be bumped
        first (then the same future waits for that)."""
        self.added.clear()
        self.started = False
        if not step.committed and self._needs_bump:
            self._steps.appendleft(Step("bump", step.result))
            return
        self.state = READY
        self.error = None
        _done(step.result)

    # error states ---------------------------------------------------------------------------

    def _abortable(self, error: BaseException) -> None:
        if self.state in (FATAL_ERROR, ABORTING, ABORTABLE_ERROR):
            return
        log.warning("transactional id %r: the transaction must be aborted: %s",
                    self.transactional_id, error)
        self.state = ABORTABLE_ERROR
        self.error = error  # type: ignore[assignment]
        wrapped = TransactionAbortableError(
            f"the transaction cannot commit ({error}): abort_transaction() and retry", error)
        for step in [s for s in self._steps if s.kind in ("end", "add_offsets",
                                                          "txn_offset_commit")]:
            self._steps.remove(step)
            _fail_future(step.result, wrapped)

    def _fatal(self, error: BaseException) -> None:
        if self.state == FATAL_ERROR:
            return
        log.error("transactional id %r: fatal, the producer must be closed: %s",
                  self.transactional_id, error)
        self.state = FATAL_ERROR
        if not isinstance(error, TransactionFatalError):
            error = TransactionFatalError(f"fatal: {error}; close the producer", error)
        self.error = error  # type: ignore[assignment]
        self.fail_all(error)

    def _check_not_fatal(self) -> None:
        if self.state == FATAL_ERROR:
            raise self.error  # type: ignore[misc]

    def _check_sending(self, what: str) -> None:
        self._check_not_fatal()
        if self.state == ABORTABLE_ERROR:
            raise TransactionAbortableError(
                f"{what}: the transaction cannot commit ({self.error}): abort_transaction() "
                "and retry", self.error)
        if self.state != IN_TRANSACTION:
            raise self._state_error(what)

    def _state_error(self, what: str) -> TransactionStateError:
        hint = {UNINITIALIZED: "call init_transactions() first",
                INITIALIZING: "init_transactions() has not finished",
                READY: "call begin_transaction() first",
                IN_TRANSACTION: "a transaction is already open",
                COMMITTING: "the transaction is being committed",
                ABORTING: "the transaction is being aborted",
                ABORTABLE_ERROR: "abort_transaction() first"}.get(self.state, "")
        return TransactionStateError(f"{what} in state {self.state}: {hint}")

    def _queue(self, step: Step) -> Any:
        self._steps.append(step)
        return step.result

    def _pending(self, kind: str) -> Any:
        for step in self._steps:
            if step.kind == kind or kind == "end" and step.kind == "bump":
                return step.result
        return None


def _done(future) -> None:
    if not future.done():
        future.set_result(None)


def _fail_future(future, error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
