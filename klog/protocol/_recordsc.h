/* Shared by the compiled records codec's files (see _recordsc.c): zig-zag varints, the
 * outcome codes, and the functions the module exports. */
#ifndef KLOG_RECORDSC_H
#define KLOG_RECORDSC_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { OK = 0, FALLBACK = 1, FAILED = -1 }; /* FALLBACK: ask the pure codec; FAILED: error set */

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
/* A record up to its headers: length, attributes, timestamp and offset deltas, key, value
 * (NULL: null). The encoders (_recordsc_encode.c, _recordsc_segments.c) add the headers. */
static inline char *write_record_head(char *out, int64_t body_len, int64_t delta,
                                      int64_t offset_delta, const char *key, Py_ssize_t key_len,
                                      const char *value, Py_ssize_t value_len)
{
    out = write_varint(out, body_len);
    *out++ = 0; /* attributes */
    out = write_varint(out, delta);
    out = write_varint(out, offset_delta);
    if (key) {
        out = write_varint(out, key_len);
        memcpy(out, key, key_len);
        out += key_len;
    } else {
        *out++ = 1; /* varint -1 */
    }
    if (value) {
        out = write_varint(out, value_len);
        memcpy(out, value, value_len);
        out += value_len;
    } else {
        *out++ = 1;
    }
    return out;
}

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

PyObject *klog_encode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *klog_encode_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *klog_decode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *klog_decode_columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *klog_key_digest(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *klog_map_keys(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *klog_kept_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *klog_table_put(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *klog_table_get(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *klog_table_move(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *klog_encode_segments(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
