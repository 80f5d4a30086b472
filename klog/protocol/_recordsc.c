/* klog.protocol._recordsc: the records section of a v2 record batch, compiled.
 *
 * The compiled twin of klog/protocol/records_encode.py and records_decode.py, which stay the
 * reference: the same bytes out, the same records back. It never raises a format error of its
 * own. Whenever an input is anything but plainly well formed (a field of an unusual type, a
 * truncated buffer, a bad varint, a negative length, bytes left over, an integer past 64 bits),
 * a function returns None and the caller runs the pure-Python codec, which either gives the
 * same answer or raises the precise CorruptBatchError / TypeError / ValueError. So errors are
 * the reference's by construction, and this file stays a plain fast path.
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
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* ---- varints --------------------------------------------------------------------------- */

static inline uint64_t zigzag(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }

static inline Py_ssize_t varint_size(int64_t v)
{
    uint64_t u = zigzag(v);
    Py_ssize_t n = 1;
    while (u > 0x7F) {
        u >>= 7;
        n++;
    }
    return n;
}

static inline char *write_varint(char *p, int64_t v)
{
    uint64_t u = zigzag(v);
    while (u > 0x7F) {
        *p++ = (char)((u & 0x7F) | 0x80);
        u >>= 7;
    }
    *p++ = (char)u;
    return p;
}

/* 0 and the value, or -1: past `end`, longer than 10 bytes, or past 64 bits (the pure decoder
 * then gives the verdict). */
static inline int read_varint(const unsigned char *buf, Py_ssize_t *pos, Py_ssize_t end,
                              int64_t *out)
{
    Py_ssize_t p = *pos;
    if (p < end && buf[p] < 0x80) { /* the common one-byte case */
        unsigned b = buf[p];
        *out = (int64_t)(b >> 1) ^ -(int64_t)(b & 1);
        *pos = p + 1;
        return 0;
    }
    uint64_t u = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (p >= end)
            return -1;
        unsigned b = buf[p++];
        if (shift == 63 && b > 1)
            return -1;
        u |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
            *pos = p;
            return 0;
        }
    }
    return -1;
}

/* ---- encoding -------------------------------------------------------------------------- */

enum { OK = 0, FALLBACK = 1, FAILED = -1 }; /* FAILED: a Python exception is set */

/* bytes or bytearray (exactly): pointer and length. Anything else: FALLBACK (memoryviews and
 * subclasses are rare and take the reference path). */
static inline int as_bytes(PyObject *o, const char **p, Py_ssize_t *n)
{
    if (PyBytes_CheckExact(o)) {
        *p = PyBytes_AS_STRING(o);
        *n = PyBytes_GET_SIZE(o);
        return OK;
    }
    if (PyByteArray_CheckExact(o)) {
        *p = PyByteArray_AS_STRING(o);
        *n = PyByteArray_GET_SIZE(o);
        return OK;
    }
    return FALLBACK;
}

static inline int header_key(PyObject *o, const char **p, Py_ssize_t *n)
{
    if (PyUnicode_CheckExact(o)) {
        *p = PyUnicode_AsUTF8AndSize(o, n);
        if (*p == NULL) { /* lone surrogates: the reference raises its own error */
            PyErr_Clear();
            return FALLBACK;
        }
        return OK;
    }
    return as_bytes(o, p, n);
}

/* Size of the encoded headers (the count included), or -1 for FALLBACK. */
static Py_ssize_t headers_size(PyObject *headers)
{
    if (headers == Py_None)
        return 1;
    if (!PyList_CheckExact(headers) && !PyTuple_CheckExact(headers))
        return -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(headers);
    if (count == 0)
        return 1;
    PyObject **items = PySequence_Fast_ITEMS(headers);
    Py_ssize_t size = varint_size(count);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *pair = items[i];
        const char *p;
        Py_ssize_t n;
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2)
            return -1;
        if (header_key(PyTuple_GET_ITEM(pair, 0), &p, &n) != OK)
            return -1;
        size += varint_size(n) + n;
        PyObject *value = PyTuple_GET_ITEM(pair, 1);
        if (value == Py_None) {
            size += 1;
        } else {
            if (as_bytes(value, &p, &n) != OK)
                return -1;
            size += varint_size(n) + n;
        }
    }
    return size;
}

static char *write_headers(char *out, PyObject *headers)
{
    if (headers == Py_None || PySequence_Fast_GET_SIZE(headers) == 0) {
        *out++ = 0;
        return out;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(headers);
    PyObject **items = PySequence_Fast_ITEMS(headers);
    out = write_varint(out, count);
    for (Py_ssize_t i = 0; i < count; i++) {
        const char *p;
        Py_ssize_t n;
        header_key(PyTuple_GET_ITEM(items[i], 0), &p, &n); /* checked by headers_size */
        out = write_varint(out, n);
        memcpy(out, p, n);
        out += n;
        PyObject *value = PyTuple_GET_ITEM(items[i], 1);
        if (value == Py_None) {
            out = write_varint(out, -1);
        } else {
            as_bytes(value, &p, &n);
            out = write_varint(out, n);
            memcpy(out, p, n);
            out += n;
        }
    }
    return out;
}

/* One record, measured: what the second pass needs to write it without re-checking. */
typedef struct {
    int64_t timestamp, delta;
    const char *key, *value; /* NULL: a null key or value */
    Py_ssize_t key_len, value_len, headers_len, body_len;
    PyObject *headers;
} Measured;

static inline int as_int64(PyObject *o, int64_t *out)
{
    if (!PyLong_CheckExact(o))
        return FALLBACK;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return FALLBACK;
    }
    *out = v;
    return OK;
}

static inline int nullable(PyObject *o, const char **p, Py_ssize_t *n)
{
    if (o == Py_None) {
        *p = NULL;
        *n = 0;
        return OK;
    }
    return as_bytes(o, p, n);
}

/* ts: the record's timestamp object; now: now_ms (None allowed). */
static int measure(PyObject *ts, PyObject *key, PyObject *value, PyObject *headers,
                   int64_t offset_delta, int64_t base_ts, PyObject *now, Measured *m)
{
    if (as_int64(ts == Py_None ? now : ts, &m->timestamp) != OK)
        return FALLBACK; /* no timestamp and no now_ms, a float, a bool: the reference says */
    if (__builtin_sub_overflow(m->timestamp, base_ts, &m->delta))
        return FALLBACK;
    if (nullable(key, &m->key, &m->key_len) != OK || nullable(value, &m->value, &m->value_len))
        return FALLBACK;
    m->headers_len = headers_size(headers);
    if (m->headers_len < 0)
        return FALLBACK;
    m->headers = headers;
    m->body_len = 1 + varint_size(m->delta) + varint_size(offset_delta)
                  + (m->key ? varint_size(m->key_len) + m->key_len : 1)
                  + (m->value ? varint_size(m->value_len) + m->value_len : 1) + m->headers_len;
    return OK;
}

static char *write_record(char *out, const Measured *m, int64_t offset_delta)
{
    out = write_varint(out, m->body_len);
    *out++ = 0; /* attributes */
    out = write_varint(out, m->delta);
    out = write_varint(out, offset_delta);
    if (m->key) {
        out = write_varint(out, m->key_len);
        memcpy(out, m->key, m->key_len);
        out += m->key_len;
    } else {
        *out++ = 1; /* varint -1 */
    }
    if (m->value) {
        out = write_varint(out, m->value_len);
        memcpy(out, m->value, m->value_len);
        out += m->value_len;
    } else {
        *out++ = 1;
    }
    return write_headers(out, m->headers);
}

static inline int unpack_record(PyObject *record, PyObject **fields)
{
    if (!PyTuple_CheckExact(record) || PyTuple_GET_SIZE(record) != 4)
        return FALLBACK; /* the reference unpacks any 4-item iterable */
    for (int i = 0; i < 4; i++)
        fields[i] = PyTuple_GET_ITEM(record, i);
    return OK;
}

PyDoc_STRVAR(encode_records_doc,
"encode_records(records, base_ts, now_ms) -> (body, max_ts) | None\n\n"
"The records section of a batch for a list or tuple of (timestamp_ms, key, value, headers)\n"
"tuples, offset deltas 0, 1, ...; None when the pure encoder must answer (encode_all).");

static PyObject *encode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int64_t base_ts;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "encode_records takes 3 arguments");
        return NULL;
    }
    PyObject *records = args[0], *now = args[2];
    if ((!PyList_CheckExact(records) && !PyTuple_CheckExact(records))
        || as_int64(args[1], &base_ts) != OK)
        Py_RETURN_NONE;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(records);
    Measured *measured = PyMem_Malloc(sizeof(Measured) * (count ? count : 1));
    if (measured == NULL)
        return PyErr_NoMemory();
    PyObject **items = PySequence_Fast_ITEMS(records);
    Py_ssize_t total = 0;
    int64_t max_ts = base_ts;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *f[4];
        Measured *m = &measured[i];
        if (unpack_record(items[i], f) != OK
            || measure(f[0], f[1], f[2], f[3], i, base_ts, now, m) != OK) {
            PyMem_Free(measured);
            Py_RETURN_NONE;
        }
        total += varint_size(m->body_len) + m->body_len;
        if (m->timestamp > max_ts)
            max_ts = m->timestamp;
    }
    PyObject *body = PyBytes_FromStringAndSize(NULL, total);
    if (body == NULL) {
        PyMem_Free(measured);
        return NULL;
    }
    char *out = PyBytes_AS_STRING(body);
    for (Py_ssize_t i = 0; i < count; i++)
        out = write_record(out, &measured[i], i);
    PyMem_Free(measured);
    PyObject *max = PyLong_FromLongLong(max_ts);
    if (max == NULL) {
        Py_DECREF(body);
        return NULL;
    }
    PyObject *result = PyTuple_Pack(2, body, max);
    Py_DECREF(body);
    Py_DECREF(max);
    return result;
}

PyDoc_STRVAR(encode_record_doc,
"encode_record(offset_delta, timestamp, base_ts, key, value, headers, now_ms)\n"
"    -> (b'', record, timestamp) | None\n\n"
"One record, length prefix included, in encode_one's shape; None: ask encode_one.");

static PyObject *encode_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int64_t offset_delta, base_ts;
    Measured m;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "encode_record takes 7 arguments");
        return NULL;
    }
    if (as_int64(args[0], &offset_delta) != OK || as_int64(args[2], &base_ts) != OK
        || measure(args[1], args[3], args[4], args[5], offset_delta, base_ts, args[6], &m) != OK)
        Py_RETURN_NONE;
    PyObject *record = PyBytes_FromStringAndSize(NULL, varint_size(m.body_len) + m.body_len);
    if (record == NULL)
        return NULL;
    write_record(PyBytes_AS_STRING(record), &m, offset_delta);
    PyObject *empty = PyBytes_FromStringAndSize(NULL, 0);
    PyObject *ts = PyLong_FromLongLong(m.timestamp);
    PyObject *result = (empty && ts) ? PyTuple_Pack(3, empty, record, ts) : NULL;
    Py_XDECREF(empty);
    Py_XDECREF(ts);
    Py_DECREF(record);
    return result;
}

/* ---- decoding -------------------------------------------------------------------------- */

/* One record's fields as positions in the buffer (key/value offset -1: null). */
typedef struct {
    int64_t offset, timestamp;
    Py_ssize_t key_at, key_len, value_at, value_len, headers_at, header_count, end;
} Fields;

/* Read the record at *pos (bounded by end) the way the checked decoder does; -1: ask it. */
static int read_record(const unsigned char *buf, Py_ssize_t *pos, Py_ssize_t end,
                       int64_t base_offset, int64_t base_ts, Fields *f)
{
    int64_t length, delta, n;
    Py_ssize_t p = *pos;
    if (read_varint(buf, &p, end, &length) || length < 0 || length > end - p)
        return -1;
    Py_ssize_t record_end = p + (Py_ssize_t)length;
    p += 1; /* attributes */
    if (read_varint(buf, &p, record_end, &delta)
        || __builtin_add_overflow(base_ts, delta, &f->timestamp))
        return -1;
    if (read_varint(buf, &p, record_end, &delta)
        || __builtin_add_overflow(base_offset, delta, &f->offset))
        return -1;
    for (int i = 0; i < 2; i++) { /* key, value */
        Py_ssize_t *at = i ? &f->value_at : &f->key_at, *len = i ? &f->value_len : &f->key_len;
        if (read_varint(buf, &p, record_end, &n) || n < -1 || n > record_end - p)
            return -1;
        *at = n < 0 ? -1 : p;
        *len = n < 0 ? 0 : (Py_ssize_t)n;
        p += *len;
    }
    if (read_varint(buf, &p, record_end, &n) || n < 0)
        return -1;
    f->header_count = (Py_ssize_t)n;
    f->headers_at = p;
    for (int64_t h = 0; h < n; h++) { /* skip them now; built by make_headers */
        for (int i = 0; i < 2; i++) {
            int64_t len;
            if (read_varint(buf, &p, record_end, &len) || len < (i ? -1 : 0)
                || len > record_end - p)
                return -1;
            if (len > 0)
                p += (Py_ssize_t)len;
        }
    }
    if (p != record_end)
        return -1;
    f->end = record_end;
    *pos = record_end;
    return 0;
}

/* The headers list of a record read by read_record; NULL with an error set, or NULL with no
 * error for a key that is not UTF-8 (the reference then raises). */
static PyObject *make_headers(const unsigned char *buf, const Fields *f)
{
    PyObject *headers = PyList_New(f->header_count);
    Py_ssize_t p = f->headers_at;
    for (Py_ssize_t h = 0; headers && h < f->header_count; h++) {
        int64_t n;
        read_varint(buf, &p, f->end, &n);
        PyObject *key = PyUnicode_DecodeUTF8((const char *)buf + p, (Py_ssize_t)n, NULL);
        if (key == NULL) {
            Py_CLEAR(headers);
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                PyErr_Clear();
            return NULL;
        }
        p += (Py_ssize_t)n;
        read_varint(buf, &p, f->end, &n);
        PyObject *value;
        if (n < 0) {
            value = Py_NewRef(Py_None);
        } else {
            value = PyBytes_FromStringAndSize((const char *)buf + p, (Py_ssize_t)n);
            p += (Py_ssize_t)n;
        }
        PyObject *pair = value ? PyTuple_Pack(2, key, value) : NULL;
        Py_DECREF(key);
        Py_XDECREF(value);
        if (pair == NULL)
            Py_CLEAR(headers);
        else
            PyList_SET_ITEM(headers, h, pair);
    }
    return headers;
}

static inline PyObject *nullable_bytes(const unsigned char *buf, Py_ssize_t at, Py_ssize_t n)
{
    if (at < 0)
        return Py_NewRef(Py_None);
    return PyBytes_FromStringAndSize((const char *)buf + at, n);
}

/* A record_type instance, built as tuple.__new__(record_type, fields) builds it. */
static PyObject *make_record(PyTypeObject *type, const unsigned char *buf, const Fields *f,
                             PyObject *headers)
{
    PyObject *items[5] = {
        PyLong_FromLongLong(f->offset), PyLong_FromLongLong(f->timestamp),
        nullable_bytes(buf, f->key_at, f->key_len), nullable_bytes(buf, f->value_at, f->value_len),
        headers};
    PyObject *record = NULL;
    if (items[0] && items[1] && items[2] && items[3])
        record = type == &PyTuple_Type ? PyTuple_New(5) : type->tp_alloc(type, 5);
    if (record == NULL) {
        for (int i = 0; i < 5; i++)
            Py_XDECREF(items[i]);
        return NULL;
    }
    for (int i = 0; i < 5; i++)
        PyTuple_SET_ITEM(record, i, items[i]);
    return record;
}

/* Common arguments of the decoders: (data, start, end, count, base_offset, base_ts).
 * 0 and a held buffer, 1 (None: ask the reference), or -1 (error set). */
static int decode_args(PyObject *const *args, Py_buffer *view, Py_ssize_t *start,
                       Py_ssize_t *end, Py_ssize_t *count, int64_t *base_offset,
                       int64_t *base_ts)
{
    int64_t s, e, c;
    if (as_int64(args[1], &s) || as_int64(args[2], &e) || as_int64(args[3], &c)
        || as_int64(args[4], base_offset) || as_int64(args[5], base_ts))
        return FALLBACK;
    if (PyObject_GetBuffer(args[0], view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        return FALLBACK;
    }
    if (s < 0 || s > e || e > view->len || c < 0 || c > e - s) { /* a record takes >= 1 byte */
        PyBuffer_Release(view);
        return FALLBACK;
    }
    *start = (Py_ssize_t)s;
    *end = (Py_ssize_t)e;
    *count = (Py_ssize_t)c;
    return OK;
}

PyDoc_STRVAR(decode_records_doc,
"decode_records(data, start, end, count, base_offset, base_ts, record_type) -> list | None\n\n"
"The count records of data[start:end] as record_type tuples (a tuple subclass); None when\n"
"the bytes need the pure decoder's verdict (it raises CorruptBatchError or agrees).");

static PyObject *decode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    Py_ssize_t pos, end, count;
    int64_t base_offset, base_ts;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "decode_records takes 7 arguments");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)args[6];
    if (!PyType_Check(args[6]) || !PyType_IsSubtype(type, &PyTuple_Type))
        Py_RETURN_NONE;
    if (decode_args(args, &view, &pos, &end, &count, &base_offset, &base_ts) != OK)
        Py_RETURN_NONE;
    const unsigned char *buf = view.buf;
    PyObject *records = PyList_New(count);
    for (Py_ssize_t i = 0; records && i < count; i++) {
        Fields f;
        PyObject *headers, *record = NULL;
        if (read_record(buf, &pos, end, base_offset, base_ts, &f) < 0) {
            Py_CLEAR(records);
            break;
        }
        headers = f.header_count ? make_headers(buf, &f) : PyList_New(0);
        if (headers)
            record = make_record(type, buf, &f, headers);
        if (record == NULL)
            Py_CLEAR(records);
        else
            PyList_SET_ITEM(records, i, record);
    }
    PyBuffer_Release(&view);
    if (records && pos != end)
        Py_CLEAR(records);
    if (records == NULL && !PyErr_Occurred())
        Py_RETURN_NONE;
    return records;
}

static PyMethodDef methods[] = {
    {"encode_records", (PyCFunction)(void (*)(void))encode_records, METH_FASTCALL,
     encode_records_doc},
    {"encode_record", (PyCFunction)(void (*)(void))encode_record, METH_FASTCALL,
     encode_record_doc},
    {"decode_records", (PyCFunction)(void (*)(void))decode_records, METH_FASTCALL,
     decode_records_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "klog.protocol._recordsc",
    "The records section of v2 record batches, compiled (see klog.protocol.records_codec).",
    -1, methods,
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
