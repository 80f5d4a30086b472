/* Decoding records sections (see _recordsc.c for the rules): into record tuples or into
 * Arrow-shaped columns; any surprise answers None (the pure decoder's verdict). */
#include "_recordsc.h"

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
        int64_t n = 0; /* read_varint cannot fail here: read_record walked these bytes */
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

/* A batch's records are kept from the cyclic GC while the batch is built, and handed to it
 * all at once at the end: otherwise every ~350 records a young-generation collection walks the
 * half-built batch and promotes it, and the promoted thousands soon trigger full collections of
 * the whole heap (a 1000-record batch decoded 3x slower with the GC on than off). Records and
 * their headers lists are untracked only while nothing but our list refers to them; a list
 * freed on an error path untracks its items itself, which is harmless for untracked ones. */
static inline void hide_from_gc(PyObject *record, PyObject *headers)
{
    PyObject_GC_UnTrack(headers);
    PyObject_GC_UnTrack(record);
}

static void show_to_gc(PyObject *records)
{
    for (Py_ssize_t i = 0, n = PyList_GET_SIZE(records); i < n; i++) {
        PyObject *record = PyList_GET_ITEM(records, i);
        PyObject_GC_Track(PyTuple_GET_ITEM(record, 4));
        PyObject_GC_Track(record);
    }
}

/* Common arguments of the decoders: (data, start, end, count, base_offset, base_ts).
 * 0 and a held buffer, 1 (None: ask the reference), or -1 (error set). */
static int decode_args(PyObject *const *args, Py_buffer *view, Py_ssize_t *start,
                       Py_ssize_t *end, Py_ssize_t *count, int64_t *base_offset,
                       int64_t *base_ts)
{
    int64_t s, e, c;
    if (as_int64(args[1], &s) != OK || as_int64(args[2], &e) != OK || as_int64(args[3], &c) != OK
        || as_int64(args[4], base_offset) != OK || as_int64(args[5], base_ts) != OK)
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

PyObject *klog_decode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
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
        if (record == NULL) {
            Py_CLEAR(records);
        } else {
            hide_from_gc(record, headers);
            PyList_SET_ITEM(records, i, record);
        }
    }
    PyBuffer_Release(&view);
    if (records && pos != end)
        Py_CLEAR(records);
    if (records == NULL)
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    show_to_gc(records);
    return records;
}

/* Grow a bytearray by n bytes; the new bytes' address, or NULL with an error set. */
static char *grow(PyObject *array, Py_ssize_t n)
{
    Py_ssize_t size = PyByteArray_GET_SIZE(array);
    if (PyByteArray_Resize(array, size + n) < 0)
        return NULL;
    return PyByteArray_AS_STRING(array) + size;
}

/* The last int64 of an Arrow offsets buffer (it always holds at least the first 0). */
static int last_offset(PyObject *array, int64_t *out)
{
    Py_ssize_t size = PyByteArray_GET_SIZE(array);
    if (size < 8 || size % 8)
        return FALLBACK;
    memcpy(out, PyByteArray_AS_STRING(array) + size - 8, 8);
    return OK;
}

/* Record i's key or value into its three Arrow buffers (out: end offsets, bytes, validity). */
static inline void put_cell(char **out, Py_ssize_t i, const unsigned char *buf, Py_ssize_t at,
                            Py_ssize_t len, int64_t *end)
{
    if (len) {
        memcpy(out[1], buf + at, len);
        out[1] += len;
    }
    *end += len;
    memcpy(out[0] + 8 * i, end, 8);
    out[2][i] = at >= 0;
}

PyObject *klog_decode_columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    Py_ssize_t pos, end, count;
    int64_t base_offset, base_ts, key_base, value_base;
    if (nargs != 15) {
        PyErr_SetString(PyExc_TypeError, "decode_columns takes 15 arguments");
        return NULL;
    }
    for (int i = 6; i < 14; i++)
        if (!PyByteArray_CheckExact(args[i]))
            Py_RETURN_NONE;
    PyObject *headers_column = args[14];
    if (!PyList_CheckExact(headers_column) || last_offset(args[8], &key_base) != OK
        || last_offset(args[11], &value_base) != OK)
        Py_RETURN_NONE;
    if (decode_args(args, &view, &pos, &end, &count, &base_offset, &base_ts) != OK)
        Py_RETURN_NONE;
    const unsigned char *buf = view.buf;
    Fields *fields = PyMem_Malloc(sizeof(Fields) * (count ? count : 1));
    PyObject *headers = PyList_New(count); /* None or a list per record, all made first */
    int status = fields && headers ? OK : FAILED;
    Py_ssize_t key_bytes = 0, value_bytes = 0;
    for (Py_ssize_t i = 0; status == OK && i < count; i++) {
        Fields *f = &fields[i];
        if (read_record(buf, &pos, end, base_offset, base_ts, f) < 0) {
            status = FALLBACK;
            break;
        }
        key_bytes += f->key_len;
        value_bytes += f->value_len;
        PyObject *h = f->header_count ? make_headers(buf, f) : Py_NewRef(Py_None);
        if (h == NULL)
            status = PyErr_Occurred() ? FAILED : FALLBACK;
        else
            PyList_SET_ITEM(headers, i, h);
    }
    if (status == OK && pos != end)
        status = FALLBACK;
    char *out[8] = {NULL};
    static const int width[8] = {8, 8, 8, 0, 1, 8, 0, 1};
    for (int i = 0; status == OK && i < 8; i++) {
        Py_ssize_t n = i == 3 ? key_bytes : i == 6 ? value_bytes : width[i] * count;
        out[i] = grow(args[6 + i], n);
        if (out[i] == NULL)
            status = FAILED; /* a partial append: only on MemoryError */
    }
    for (Py_ssize_t i = 0; status == OK && i < count; i++) {
        const Fields *f = &fields[i];
        memcpy(out[0] + 8 * i, &f->offset, 8);
        memcpy(out[1] + 8 * i, &f->timestamp, 8);
        put_cell(out + 2, i, buf, f->key_at, f->key_len, &key_base);
        put_cell(out + 5, i, buf, f->value_at, f->value_len, &value_base);
    }
    PyBuffer_Release(&view);
    PyMem_Free(fields);
    if (status == OK) {
        Py_ssize_t size = PyList_GET_SIZE(headers_column);
        status = PyList_SetSlice(headers_column, size, size, headers) < 0 ? FAILED : OK;
    }
    Py_XDECREF(headers);
    if (status == FAILED)
        return NULL;
    if (status == FALLBACK)
        Py_RETURN_NONE;
    Py_RETURN_TRUE;
}

