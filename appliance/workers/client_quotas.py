"""A worker's enforcement of client quotas, as a Kafka broker's quota managers do.

Three quota types, each with its own sensors: `producer_byte_rate` on the record bytes a
Produce request brings, `consumer_byte_rate` on the record bytes a Fetch answer returns,
`request_percentage` on the time the worker's loop spent in the request's handler (a
percentage of one thread, as Kafka's request quota). A client's quota is the first of KIP-55's
eight entities that sets it (`entities.resolve`); clients that resolve to the same entity and
tags share one sampled rate (`rate.SampledRate`, `quota.window.num` windows of
`quota.window.size.seconds`).

When an answer is ready the value is recorded and the throttle time computed (Kafka's, at
most one window). A throttled answer carries `throttle_time_ms` and leaves at once (KIP-219);
the connection then reads nothing more until the time is over. A consumer fetch over its
quota is answered empty instead (Kafka answers empty and takes the bytes back out of the
rate), and a consumer's fetch asks for no more than its quota allows in the windows.

Exempt, as in Kafka: followers' replica fetches, the inter-broker APIs (WriteTxnMarkers,
AddPartitionsToTxn v4+ from partition leaders) and the ones a client sends before it is
authenticated (ApiVersions, SaslHandshake, SaslAuthenticate). With no quota stored at all the
connection does nothing but one comparison per answer.
"""

from __future__ import annotations

import time

from appliance.client_quotas.entities import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    resolve,
)
from appliance.client_quotas.rate import SampledRate

PRODUCE, FETCH = 0, 1
EXEMPT_APIS = frozenset({17, 18, 27, 36})  # SaslHandshake, ApiVersions, WriteTxnMarkers, SaslAuth.
ADD_PARTITIONS_TO_TXN, BROKER_VERSION = 24, 4
QUOTA_TYPES = ("produce", "fetch", "request")
KEY_OF = {"produce": PRODUCER_BYTE_RATE, "fetch": CONSUMER_BYTE_RATE,
          "request": REQUEST_PERCENTAGE}


def user_of(principal: str | None) -> str:
    """Kafka's user entity name: the principal's name (ANONYMOUS when unauthenticated)."""
    if not principal:
        return "ANONYMOUS"
    return principal.split(":", 1)[1] if ":" in principal else principal


def exempt(request) -> bool:
    key = request.header.api_key
    if key in EXEMPT_APIS:
        return True
    if key == ADD_PARTITIONS_TO_TXN and request.header.api_version >= BROKER_VERSION:
        return True
    return key == FETCH and request.body is not None and request.body.replica_id >= 0


def _percent(nanoseconds: int) -> float:
    return nanoseconds / 1e7


def produce_bytes(body) -> int:
    return sum(len(p.records) for t in body.topic_data for p in t.partition_data
               if p.records is not None)


def fetch_bytes(body) -> int:
    total = 0
    for topic in body.responses:
        for part in topic.partitions:
            records = part.records
            if records is None:
                continue
            length = getattr(records, "length", None)
            total += length if length is not None else len(records)
    return total


class QuotaEnforcer:
    """One worker's quota managers: sensors, throttle decisions, throttle statistics."""

    def __init__(self, store, *, window_num: int = 11, window_size_s: int = 1,
                 clock=time.monotonic):
        self.store = store
        self.window_num = window_num
        self.window_ms = window_size_s * 1000
        self.clock = clock
        self.active = bool(store.quotas())
        self._version = store.version
        self._resolved: dict[tuple[str, str, str], tuple[float, tuple[str, str]] | None] = {}
        self._rates: dict[tuple[str, str, str], SampledRate] = {}
        # (quota type, user, client id) -> [throttled answers, throttle ms in all]
        self.throttles: dict[tuple[str, str, str], list[int]] = {}

    def tick(self, now_s: float) -> None:
        """Pick up the store's changes (cheap when the store has none)."""
        self.store.refresh(now_s)
        if self.store.version != self._version:
            self._version = self.store.version
            self._resolved.clear()
            self.active = bool(self.store.quotas())

    def _quota(self, kind: str, user: str, client_id: str):
        key = (kind, user, client_id)
        try:
            return self._resolved[key]
        except KeyError:
            found = self._resolved[key] = resolve(self.store.quotas(), user, client_id,
                                                  KEY_OF[kind])
            return found

    def _rate(self, kind: str, tags: tuple[str, str]) -> SampledRate:
        key = (kind, *tags)
        rate = self._rates.get(key)
        if rate is None:
            rate = self._rates[key] = SampledRate(self.window_num, self.window_ms)
        return rate

    def _record(self, kind: str, user: str, client_id: str, value, arg,
                now_ms: float) -> tuple[int, SampledRate | None, float]:
        """Record value(arg) (computed only when a quota applies): (throttle ms, the rate,
        the value)."""
        found = self._quota(kind, user, client_id)
        if found is None:
            return 0, None, 0
        bound, tags = found
        rate = self._rate(kind, tags)
        amount = value(arg)
        rate.record(amount, now_ms)
        return rate.throttle_ms(bound, now_ms), rate, amount

    def before(self, request) -> None:
        """A consumer fetch asks for no more than its quota allows over the windows
        (Kafka's getMaxValueInQuotaWindow)."""
        if request.header.api_key != FETCH or request.body is None or exempt(request):
            return
        found = self._quota("fetch", user_of(request.principal), request.header.client_id or "")
        if found is not None:
            cap = int(found[0] * (self.window_num - 1) * self.window_ms / 1000)
            body = request.body
            if body.max_bytes <= 0 or body.max_bytes > cap:
                body.max_bytes = max(1, cap)

    def after(self, request, result, handler_ns: int):
        """Record the answered request; (the answer to send, throttle time in ms)."""
        if request.body is None or exempt(request):
            return result, 0
        now_ms = self.clock() * 1000
        user = user_of(request.principal)
        client_id = request.header.client_id or ""
        key = request.header.api_key
        # Kafka's request quota counts nanoseconds as a percentage of one second
        request_ms, _, _ = self._record("request", user, client_id, _percent, handler_ns, now_ms)
        band_ms, kind = 0, "request"
        if key == PRODUCE:
            band_ms, _, _ = self._record("produce", user, client_id, produce_bytes,
                                         request.body, now_ms)
            kind = "produce"
            if request.body.acks == 0:
                request_ms = 0
        elif key == FETCH and hasattr(result, "responses"):
            band_ms, rate, size = self._record("fetch", user, client_id, fetch_bytes, result,
                                               now_ms)
            kind = "fetch"
            if max(band_ms, request_ms) > 0:
                if rate is not None:
                    rate.record(-size, now_ms)  # the bytes are not sent: out of the rate
                result = type(result)(throttle_time_ms=0, error_code=0,
                                      session_id=result.session_id, responses=[])
        throttle_ms = max(band_ms, request_ms)
        if throttle_ms <= 0:
            return result, 0
        if request_ms > band_ms:
            kind = "request"
        counts = self.throttles.get((kind, user, client_id))
        if counts is None:
            counts = self.throttles[(kind, user, client_id)] = [0, 0]
        counts[0] += 1
        counts[1] += throttle_ms
        if hasattr(result, "throttle_time_ms"):
            result.throttle_time_ms = throttle_ms
        return result, throttle_ms

    def document(self, most: int = 200) -> list:
        """The throttle statistics for the metrics: [type, user, client id, count, ms], the
        `most` most throttled clients (the metrics area is bounded)."""
        rows = [[kind, user, client, n, ms]
                for (kind, user, client), (n, ms) in list(self.throttles.items())]
        if len(rows) > most:
            rows = sorted(rows, key=lambda row: row[4], reverse=True)[:most]
        return rows
