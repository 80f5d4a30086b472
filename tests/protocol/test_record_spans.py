"""record_spans against the reference decoder: the same records, found without decoding."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from klog.protocol.record_batch import CorruptBatchError, read_header
from klog.protocol.record_spans import record_spans
from klog.protocol.records import build_batch, decode_batch, records_section

_records = st.lists(st.tuples(st.integers(0, 2**40), st.none() | st.binary(max_size=40),
                              st.none() | st.binary(max_size=300),
                              st.lists(st.tuples(st.text(max_size=5),
                                                 st.none() | st.binary(max_size=5)),
                                       max_size=2)), min_size=1, max_size=20)


@settings(max_examples=60, deadline=None)
@given(_records, st.sampled_from([0, 1, 3]))
def test_spans_match_the_decoded_records(records, codec):
    data = build_batch(records, base_offset=100, codec=codec)
    header = read_header(data)
    section, start, end = records_section(data, 0, header)
    spans = record_spans(section, start, end, header.records_count)
    _, decoded = decode_batch(data)
    assert len(spans) == len(decoded)
    for span, record in zip(spans, decoded, strict=True):
        assert 100 + span.offset_delta == record.offset
        assert header.base_timestamp + span.timestamp_delta == record.timestamp
        key = None if span.key_start < 0 else section[span.key_start:span.key_end]
        assert key == record.key and span.value_null == (record.value is None)


def test_a_short_section_is_corrupt():
    data = build_batch([(1, b"k", b"v", ())] * 3)
    header = read_header(data)
    section, start, end = records_section(data, 0, header)
    with pytest.raises(CorruptBatchError):
        record_spans(section, start, end - 2, 3)
    with pytest.raises(CorruptBatchError):
        record_spans(section, start, end, 2)
