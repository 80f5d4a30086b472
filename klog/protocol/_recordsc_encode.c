/* Encoding records sections (see _recordsc.c for the rules): two passes per batch, sizes
 * then one allocation and the writes; anything unusual answers None (the pure encoder's turn).
 */
#include "_recordsc.h"


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
        const char *p = NULL;
        Py_ssize_t n = 0;
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
    if (nullable(key, &m->key, &m->key_len) != OK
        || nullable(value, &m->value, &m->value_len) != OK)
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
    out = write_record_head(out, m->body_len, m->delta, offset_delta, m->key, m->key_len,
                            m->value, m->value_len);
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

PyObject *klog_encode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
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

PyObject *klog_encode_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
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

