/* The records section of a producer batch made of record tuples and send_batch segments,
 * encoded without a tuple per record.
 *
 * encode_segments(records, segments, base_ts) encodes what encode_records would encode for
 * records + [(ts, key, v, headers) for ts, key, values, headers in segments for v in values]
 * (klog/producer/batch.py's `_all_records`), in one pass that measures and one that writes
 * (it may run without the GIL: only bytes already measured are copied, each held by a
 * reference taken in the first pass; see RELEASE_AT). Why: at send_batch's rate the sender
 * thread spent more time making the short-lived tuples than encoding them.
 *
 * Only the producer's plain shapes are handled: int timestamps, bytes (exactly) or None keys
 * and values, no headers (None or an empty list or tuple). Anything else answers None, and
 * the caller takes the reference path (the tuples and encode_all), which gives the same bytes;
 * tests/client/test_accumulator_segments.py checks that they agree.
 */
#include "_recordsc.h"

typedef struct {
    const char *key, *value; /* NULL: a null key or value */
    Py_ssize_t key_len, value_len, body_len;
    int64_t delta, offset_delta;
} Plain;

static inline int plain_payload(PyObject *o, const char **p, Py_ssize_t *n)
{
    if (o == Py_None) {
        *p = NULL;
        *n = 0;
        return OK;
    }
    if (!PyBytes_CheckExact(o))
        return FALLBACK; /* a bytearray could change while the GIL is released */
    *p = PyBytes_AS_STRING(o);
    *n = PyBytes_GET_SIZE(o);
    return OK;
}

static inline int no_headers(PyObject *headers)
{
    return headers == Py_None
           || ((PyList_CheckExact(headers) || PyTuple_CheckExact(headers))
               && PySequence_Fast_GET_SIZE(headers) == 0);
}

/* Measure one record into *m; FALLBACK for a shape this file leaves to the reference. */
static inline int measure_plain(PyObject *key, PyObject *value, int64_t ts, int64_t base_ts,
                                int64_t offset_delta, Plain *m)
{
    if (plain_payload(key, &m->key, &m->key_len) != OK
        || plain_payload(value, &m->value, &m->value_len) != OK)
        return FALLBACK;
    if (__builtin_sub_overflow(ts, base_ts, &m->delta))
        return FALLBACK;
    m->offset_delta = offset_delta;
    m->body_len = 1 + varint_size(m->delta) + varint_size(offset_delta)
                  + (m->key ? varint_size(m->key_len) + m->key_len : 1)
                  + (m->value ? varint_size(m->value_len) + m->value_len : 1) + 1;
    return OK;
}

static inline char *write_plain(char *out, const Plain *m)
{
    out = write_record_head(out, m->body_len, m->delta, m->offset_delta, m->key, m->key_len,
                            m->value, m->value_len);
    *out++ = 0; /* no headers */
    return out;
}

/* A 4-tuple's items, or FALLBACK. */
static inline int four(PyObject *t, PyObject **f)
{
    if (!PyTuple_CheckExact(t) || PyTuple_GET_SIZE(t) != 4)
        return FALLBACK;
    for (int i = 0; i < 4; i++)
        f[i] = PyTuple_GET_ITEM(t, i);
    return OK;
}

/* The copy keeps the GIL unless a fourth argument says from how many bytes to release it:
 * released for 1 MB batches, send_batch of 50 at the defaults went from 1.32M to 0.94M msg/s
 * (median of 4 alternating rounds, same run): the sender, once done, waits for the caller's
 * thread to give the GIL back (up to the 5 ms switch interval), with the requests it was
 * about to send. Kept as an option for benchmarks to compare. */
#define RELEASE_AT PY_SSIZE_T_MAX

PyObject *klog_encode_segments(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int64_t base_ts, release_at = RELEASE_AT;
    if (nargs != 3 && nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "encode_segments takes 3 or 4 arguments");
        return NULL;
    }
    if (nargs == 4 && as_int64(args[3], &release_at) != OK) {
        PyErr_SetString(PyExc_TypeError, "encode_segments: release_at must be an int");
        return NULL;
    }
    PyObject *records = args[0], *segments = args[1];
    if (!PyList_CheckExact(records) || !PyList_CheckExact(segments)
        || as_int64(args[2], &base_ts) != OK)
        Py_RETURN_NONE;
    Py_ssize_t n_records = PyList_GET_SIZE(records), n_segments = PyList_GET_SIZE(segments);
    Py_ssize_t count = n_records;
    for (Py_ssize_t s = 0; s < n_segments; s++) {
        PyObject *f[4];
        if (four(PyList_GET_ITEM(segments, s), f) != OK || !PyList_CheckExact(f[2]))
            Py_RETURN_NONE;
        count += PyList_GET_SIZE(f[2]);
    }
    Plain *plain = PyMem_Malloc(sizeof(Plain) * (count ? count : 1));
    /* a reference to every bytes object written, for the pass without the GIL */
    PyObject **held = PyMem_Malloc(sizeof(PyObject *) * (2 * count + n_segments + 1));
    if (plain == NULL || held == NULL) {
        PyMem_Free(plain);
        PyMem_Free(held);
        return PyErr_NoMemory();
    }
    Py_ssize_t n_held = 0, total = 0, i = 0;
    int64_t max_ts = base_ts;
    int outcome = OK;
    for (Py_ssize_t r = 0; r < n_records && outcome == OK; r++, i++) {
        PyObject *f[4];
        int64_t ts;
        if (four(PyList_GET_ITEM(records, r), f) != OK || as_int64(f[0], &ts) != OK
            || !no_headers(f[3]) || measure_plain(f[1], f[2], ts, base_ts, i, &plain[i]) != OK) {
            outcome = FALLBACK;
            break;
        }
        Py_INCREF(f[1]);
        held[n_held++] = f[1];
        Py_INCREF(f[2]);
        held[n_held++] = f[2];
        total += varint_size(plain[i].body_len) + plain[i].body_len;
        if (ts > max_ts)
            max_ts = ts;
    }
    for (Py_ssize_t s = 0; s < n_segments && outcome == OK; s++) {
        PyObject *f[4];
        int64_t ts;
        four(PyList_GET_ITEM(segments, s), f); /* checked above */
        if (as_int64(f[0], &ts) != OK || !no_headers(f[3])) {
            outcome = FALLBACK;
            break;
        }
        if (ts > max_ts)
            max_ts = ts;
        PyObject *key = f[1], *values = f[2];
        Py_ssize_t n_values = PyList_GET_SIZE(values);
        if (i + n_values > count) { /* the list grew since it was counted */
            outcome = FALLBACK;
            break;
        }
        Py_INCREF(key);
        held[n_held++] = key;
        for (Py_ssize_t v = 0; v < n_values; v++, i++) {
            PyObject *value = PyList_GET_ITEM(values, v);
            if (measure_plain(key, value, ts, base_ts, i, &plain[i]) != OK) {
                outcome = FALLBACK;
                break;
            }
            Py_INCREF(value);
            held[n_held++] = value;
            total += varint_size(plain[i].body_len) + plain[i].body_len;
        }
    }
    PyObject *body = NULL, *result = NULL;
    if (outcome == OK && i == count) {
        body = PyBytes_FromStringAndSize(NULL, total);
        if (body != NULL) {
            char *out = PyBytes_AS_STRING(body);
            if (total >= release_at) {
                Py_BEGIN_ALLOW_THREADS
                for (Py_ssize_t k = 0; k < count; k++)
                    out = write_plain(out, &plain[k]);
                Py_END_ALLOW_THREADS
            } else {
                for (Py_ssize_t k = 0; k < count; k++)
                    out = write_plain(out, &plain[k]);
            }
            PyObject *max = PyLong_FromLongLong(max_ts);
            if (max != NULL)
                result = PyTuple_Pack(2, body, max);
            Py_XDECREF(max);
            Py_DECREF(body);
        }
    } else if (outcome == OK) {
        outcome = FALLBACK; /* a list shrank since it was counted */
    }
    for (Py_ssize_t k = 0; k < n_held; k++)
        Py_DECREF(held[k]);
    PyMem_Free(held);
    PyMem_Free(plain);
    if (outcome == FALLBACK)
        Py_RETURN_NONE;
    return result; /* NULL with an error set when an allocation failed */
}
