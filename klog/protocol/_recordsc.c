/* klog.protocol._recordsc: the records section of a v2 record batch, compiled.
 *
 * The compiled twin of klog/protocol/records_encode.py and records_decode.py, which stay the
 * reference: the same bytes out, the same records back. It never raises a format error of its
 * own. Whenever an input is anything but plainly well formed (a field of an unusual type, a
 * truncated buffer, a bad varint, a negative length, bytes left over, an integer past 64 bits),
 * a function returns None and the caller runs the pure-Python codec, which either gives the
 * same answer or raises the precise CorruptBatchError / TypeError / ValueError. So errors are
 * the reference's by construction, and the C stays a plain fast path.
 *
 * Files: this one (the module, KLOG_PURE_PYTHON), _recordsc_encode.c, _recordsc_decode.c
 * (records or columns), _recordsc_keys.c (the log cleaner's key passes), _recordsc.h (varints,
 * shared by all).
 *
 * Per batch, not per record: one call encodes a whole list of records into one bytes object
 * (two passes: sizes, then one allocation and the writes), and one call decodes a whole records
 * section into a list of record tuples or into columns.
 *
 * KLOG_PURE_PYTHON: read once, here, at import (C getenv), into PURE_PYTHON_REQUESTED. The
 * Python selector (klog/protocol/records_codec.py) then leaves this module unused. It lives
 * here because klog.protocol may not import os (its sans-IO contract), and because the switch
 * only means something when this module exists.
 *
 * Record layout (varints zig-zag): length, attributes int8, timestamp_delta, offset_delta,
 * key_length (-1 null), key, value_length (-1 null), value, header_count, headers
 * (key_length, key UTF-8, value_length (-1 null), value).
 */
#include "_recordsc.h"

PyDoc_STRVAR(encode_records_doc,
"encode_records(records, base_ts, now_ms) -> (body, max_ts) | None\n\n"
"The records section of a batch for a list or tuple of (timestamp_ms, key, value, headers)\n"
"tuples, offset deltas 0, 1, ...; None when the pure encoder must answer (encode_all).");

PyDoc_STRVAR(encode_record_doc,
"encode_record(offset_delta, timestamp, base_ts, key, value, headers, now_ms)\n"
"    -> (b'', record, timestamp) | None\n\n"
"One record, length prefix included, in encode_one's shape; None: ask encode_one.");

PyDoc_STRVAR(decode_records_doc,
"decode_records(data, start, end, count, base_offset, base_ts, record_type) -> list | None\n\n"
"The count records of data[start:end] as record_type tuples (a tuple subclass); None when\n"
"the bytes need the pure decoder's verdict (it raises CorruptBatchError or agrees).");

PyDoc_STRVAR(decode_columns_doc,
"decode_columns(data, start, end, count, base_offset, base_ts, offsets, timestamps,\n"
"               key_offsets, key_data, key_valid, value_offsets, value_data, value_valid,\n"
"               headers) -> True | None\n\n"
"Append the count records of data[start:end] to the columns of a RecordColumns (bytearrays\n"
"and a list, see records_columns.py); None, with nothing appended, when the bytes need the\n"
"pure decoder's verdict.");

PyDoc_STRVAR(key_digest_doc,
"key_digest(key, sip_key, outlen) -> bytes\n\n"
"SipHash-2-4 of key under the 16-byte sip_key, outlen 8 or 16 bytes (the cleaner's digest).");

PyDoc_STRVAR(table_put_doc,
"table_put(table, key, offset, sip_key) -> bool\n\n"
"Set the offset of key's digest in an offset table (a writable buffer of 24-byte slots,\n"
"zeroed when empty); True when the digest is new. The caller keeps a slot free.");

PyDoc_STRVAR(table_get_doc,
"table_get(table, key, sip_key) -> int\n\n"
"The offset of key's digest in an offset table, -1 when it is not there.");

PyDoc_STRVAR(table_move_doc,
"table_move(src, dst) -> int\n\n"
"Put every entry of the offset table src into dst (larger and empty); how many.");

PyDoc_STRVAR(map_keys_doc,
"map_keys(data, start, end, count, base_offset, base_ts, first_dirty, table, sip_key)\n"
"    -> int | None\n\n"
"Put each keyed record at or past first_dirty into the offset table (its key's digest, its\n"
"offset); how many digests were new, or None, with nothing changed, when the bytes need the\n"
"pure decoder's verdict (or first_dirty is below 0).");

PyDoc_STRVAR(kept_records_doc,
"kept_records(data, start, end, count, base_offset, base_ts, latest_offset, table,\n"
"             sip_key, horizon, log_append_time, max_timestamp)\n"
"    -> (kept, body | None, max_ts) | None\n\n"
"The records the cleaner keeps: their count, their bytes back to back (None when all or\n"
"none stay) and their largest timestamp; None when the pure path must answer.");

PyDoc_STRVAR(encode_segments_doc,
"encode_segments(records, segments, base_ts[, release_at]) -> (body, max_ts) | None\n\n"
"A producer batch's records section: its record tuples, then its send_batch segments\n"
"(timestamp, key, values, headers), as encode_records would encode them one tuple each\n"
"(see _recordsc_segments.c); None for any shape but int timestamps, bytes or None keys and\n"
"values and no headers. The copy runs without the GIL from release_at bytes (never unless\n"
"given: see _recordsc_segments.c).");

static PyMethodDef methods[] = {
    {"key_digest", (PyCFunction)(void (*)(void))klog_key_digest, METH_FASTCALL, key_digest_doc},
    {"table_put", (PyCFunction)(void (*)(void))klog_table_put, METH_FASTCALL, table_put_doc},
    {"table_get", (PyCFunction)(void (*)(void))klog_table_get, METH_FASTCALL, table_get_doc},
    {"table_move", (PyCFunction)(void (*)(void))klog_table_move, METH_FASTCALL, table_move_doc},
    {"map_keys", (PyCFunction)(void (*)(void))klog_map_keys, METH_FASTCALL, map_keys_doc},
    {"kept_records", (PyCFunction)(void (*)(void))klog_kept_records, METH_FASTCALL,
     kept_records_doc},
    {"encode_records", (PyCFunction)(void (*)(void))klog_encode_records, METH_FASTCALL,
     encode_records_doc},
    {"encode_record", (PyCFunction)(void (*)(void))klog_encode_record, METH_FASTCALL,
     encode_record_doc},
    {"decode_records", (PyCFunction)(void (*)(void))klog_decode_records, METH_FASTCALL,
     decode_records_doc},
    {"decode_columns", (PyCFunction)(void (*)(void))klog_decode_columns, METH_FASTCALL,
     decode_columns_doc},
    {"encode_segments", (PyCFunction)(void (*)(void))klog_encode_segments, METH_FASTCALL,
     encode_segments_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "klog.protocol._recordsc",
    "The records section of v2 record batches, compiled (see klog.protocol.records_codec).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__recordsc(void)
{
    PyObject *m = PyModule_Create(&module);
    const char *pure = getenv("KLOG_PURE_PYTHON");
    int requested = pure != NULL && pure[0] != '\0' && strcmp(pure, "0") != 0;
    if (m && PyModule_AddObjectRef(m, "PURE_PYTHON_REQUESTED", requested ? Py_True : Py_False)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
