/* The log cleaner's two passes over a records section, compiled: no record tuple, no key or
 * value bytes object, no Python object at all per record (appliance/segments/key_passes.py
 * calls these).
 *
 * Keys are compared by a 128-bit digest: SipHash-2-4 with 128-bit output, keyed by 16 random
 * bytes the offset map draws once per cleaning run. Why SipHash and not Kafka's MD5: both give
 * 128 bits (a chance collision among n keys is about n^2 / 2^129, nil for any map the dedupe
 * buffer allows), but MD5 collisions can be built on purpose by a producer who wants another
 * key's records compacted away, and SipHash's cannot without its secret key (it is a keyed
 * PRF); it is also several times cheaper than MD5 on short keys and needs no library.
 *
 * The digests live in an offset table (Kafka's SkimpyOffsetMap): a writable buffer the Python
 * side allocates (appliance/segments/offset_map.py), slots of 24 bytes, a 16-byte digest and
 * the 8-byte offset + 1 (native order; 0 marks an empty slot, so a fresh zeroed buffer is an
 * empty table), open addressing with linear probing from the digest's first 64 bits. The map
 * pass inserts, the rewrite pass looks up. The caller keeps the table below its load factor
 * (at least one empty slot), which bounds every probe.
 *
 * Same contract as the rest of the codec: anything but plainly well formed (and, for the
 * rewrite pass, anything the encoder would not write byte for byte the same: a longer varint
 * than needed, a non-zero record attributes byte) answers None, and the caller takes the pure
 * path for that batch, which gives the reference's result or error. Header keys must be valid
 * UTF-8 as the decoder requires (checked here without decoding them). */
#include "_recordsc.h"

/* ---- SipHash-2-4, 128-bit output --------------------------------------------------------- */

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                 \
    do {                                                                                         \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);                                \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                                                   \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                                                   \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);                                \
    } while (0)

static inline uint64_t load_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static inline void store_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* SipHash-2-4 of in[0:n] under key k (16 bytes) into out (outlen 8 or 16 bytes). */
static void siphash(const unsigned char *in, Py_ssize_t n, const unsigned char *k,
                    unsigned char *out, int outlen)
{
    uint64_t k0 = load_le64(k), k1 = load_le64(k + 8);
    uint64_t v0 = 0x736f6d6570736575ULL ^ k0, v1 = 0x646f72616e646f6dULL ^ k1;
    uint64_t v2 = 0x6c7967656e657261ULL ^ k0, v3 = 0x7465646279746573ULL ^ k1;
    if (outlen == 16)
        v1 ^= 0xee;
    const unsigned char *end = in + (n - n % 8);
    for (; in != end; in += 8) {
        uint64_t m = load_le64(in);
        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t b = ((uint64_t)n) << 56;
    for (int i = (int)(n % 8) - 1; i >= 0; i--)
        b |= ((uint64_t)in[i]) << (8 * i);
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= outlen == 16 ? 0xee : 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    store_le64(out, v0 ^ v1 ^ v2 ^ v3);
    if (outlen == 8)
        return;
    v1 ^= 0xdd;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    store_le64(out + 8, v0 ^ v1 ^ v2 ^ v3);
}

/* ---- walking records ----------------------------------------------------------------------- */

/* read_varint, and with `canonical` also: written in as few bytes as write_varint writes. */
static inline int varint_at(const unsigned char *buf, Py_ssize_t *pos, Py_ssize_t end,
                            int64_t *out, int canonical)
{
    Py_ssize_t before = *pos;
    if (read_varint(buf, pos, end, out))
        return -1;
    return canonical && *pos - before != varint_size(*out) ? -1 : 0;
}

/* Whether buf[0:n] is UTF-8 as Python's strict decoder takes it (no overlongs, surrogates or
 * code points past U+10FFFF). */
static int valid_utf8(const unsigned char *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int more;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            more = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            more = 2;
            if (c == 0xE0)
                lo = 0xA0;
            else if (c == 0xED)
                hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            more = 3;
            if (c == 0xF0)
                lo = 0x90;
            else if (c == 0xF4)
                hi = 0x8F;
        } else {
            return 0;
        }
        if (n - i - 1 < more)
            return 0;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return 0;
        for (int j = 2; j <= more; j++)
            if (s[i + j] < 0x80 || s[i + j] > 0xBF)
                return 0;
        i += more + 1;
    }
    return 1;
}

/* One record as the passes need it: where it lies (length prefix included), its offset and
 * timestamp, its key (key_at -1: null) and whether it is a tombstone. */
typedef struct {
    int64_t offset, timestamp;
    Py_ssize_t start, end, key_at, key_len;
    int tombstone;
} Rec;

/* Read the record at *pos the way the checked decoder does; -1: ask the pure path. */
static int walk_record(const unsigned char *buf, Py_ssize_t *pos, Py_ssize_t end,
                       int64_t base_offset, int64_t base_ts, int canonical, Rec *r)
{
    int64_t length, delta, n;
    Py_ssize_t p = *pos;
    r->start = p;
    if (varint_at(buf, &p, end, &length, canonical) || length < 1 || length > end - p)
        return -1;
    Py_ssize_t record_end = p + (Py_ssize_t)length;
    if (canonical && buf[p] != 0) /* the encoder writes attributes 0 */
        return -1;
    p += 1;
    if (varint_at(buf, &p, record_end, &delta, canonical)
        || __builtin_add_overflow(base_ts, delta, &r->timestamp))
        return -1;
    if (varint_at(buf, &p, record_end, &delta, canonical)
        || __builtin_add_overflow(base_offset, delta, &r->offset))
        return -1;
    for (int i = 0; i < 2; i++) { /* key, value */
        if (varint_at(buf, &p, record_end, &n, canonical) || n < -1 || n > record_end - p)
            return -1;
        if (i == 0) {
            r->key_at = n < 0 ? -1 : p;
            r->key_len = n < 0 ? 0 : (Py_ssize_t)n;
        } else {
            r->tombstone = n < 0;
        }
        if (n > 0)
            p += (Py_ssize_t)n;
    }
    if (varint_at(buf, &p, record_end, &n, canonical) || n < 0)
        return -1;
    for (int64_t h = 0; h < n; h++) {
        for (int i = 0; i < 2; i++) {
            int64_t len;
            if (varint_at(buf, &p, record_end, &len, canonical) || len < (i ? -1 : 0)
                || len > record_end - p)
                return -1;
            if (i == 0 && !valid_utf8(buf + p, (Py_ssize_t)len))
                return -1;
            if (len > 0)
                p += (Py_ssize_t)len;
        }
    }
    if (p != record_end)
        return -1;
    r->end = record_end;
    *pos = record_end;
    return 0;
}

/* The common arguments (data, start, end, count, base_offset, base_ts): OK and a held buffer,
 * or FALLBACK. */
static int section_args(PyObject *const *args, Py_buffer *view, Py_ssize_t *start,
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
    if (s < 0 || s > e || e > view->len || c < 0 || c > e - s) {
        PyBuffer_Release(view);
        return FALLBACK;
    }
    *start = (Py_ssize_t)s;
    *end = (Py_ssize_t)e;
    *count = (Py_ssize_t)c;
    return OK;
}

/* Walk all count records (checking only); OK when they fill [start, end) exactly. */
static int check_section(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t end,
                         Py_ssize_t count, int64_t base_offset, int64_t base_ts, int canonical)
{
    Rec r;
    for (Py_ssize_t i = 0; i < count; i++)
        if (walk_record(buf, &pos, end, base_offset, base_ts, canonical, &r))
            return FALLBACK;
    return pos == end ? OK : FALLBACK;
}

static inline int sip_key_arg(PyObject *o, const unsigned char **key)
{
    if (!PyBytes_CheckExact(o) || PyBytes_GET_SIZE(o) != 16)
        return FALLBACK;
    *key = (const unsigned char *)PyBytes_AS_STRING(o);
    return OK;
}

/* ---- the offset table ---------------------------------------------------------------------- */

#define SLOT_BYTES 24 /* a digest and an offset, as Kafka's SkimpyOffsetMap entry */

typedef struct {
    unsigned char *slots;
    uint64_t n; /* how many slots */
} Table;

/* The table in `o` (a writable buffer of whole slots, held in `view`): OK, or FAILED with a
 * TypeError (a wrong table is the caller's bug, not a batch for the pure path). */
static int table_arg(PyObject *o, Py_buffer *view, Table *t)
{
    if (PyObject_GetBuffer(o, view, PyBUF_WRITABLE) < 0)
        return FAILED;
    if (view->len < SLOT_BYTES || view->len % SLOT_BYTES) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_TypeError, "an offset table is a writable buffer of 24-byte slots");
        return FAILED;
    }
    t->slots = view->buf;
    t->n = (uint64_t)(view->len / SLOT_BYTES);
    return OK;
}

static inline uint64_t slot_word(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* The slot holding digest d, or the empty slot where it would go; NULL when the table is full
 * and d is not in it (the caller's load factor rules that out). */
static unsigned char *slot_for(const Table *t, const unsigned char *d)
{
    uint64_t i = (uint64_t)(((unsigned __int128)slot_word(d) * t->n) >> 64);
    uint64_t d0 = slot_word(d), d1 = slot_word(d + 8);
    for (uint64_t tries = 0; tries < t->n; tries++) {
        unsigned char *e = t->slots + i * SLOT_BYTES;
        if (slot_word(e + 16) == 0 || (slot_word(e) == d0 && slot_word(e + 8) == d1))
            return e;
        if (++i == t->n)
            i = 0;
    }
    return NULL;
}

/* Set digest d's offset: 1 when d is new, 0 when it was there, -1 (error set) when full. */
static int table_put(const Table *t, const unsigned char *d, int64_t offset)
{
    unsigned char *e = slot_for(t, d);
    if (e == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the offset table is full");
        return -1;
    }
    int fresh = slot_word(e + 16) == 0;
    uint64_t stored = (uint64_t)offset + 1;
    if (fresh)
        memcpy(e, d, 16);
    memcpy(e + 16, &stored, 8);
    return fresh;
}

/* Digest d's offset, -1 when it is not in the table. */
static int64_t table_get(const Table *t, const unsigned char *d)
{
    const unsigned char *e = slot_for(t, d);
    uint64_t stored = e == NULL ? 0 : slot_word(e + 16);
    return stored == 0 ? -1 : (int64_t)(stored - 1);
}

static inline void record_digest(const unsigned char *buf, const Rec *r,
                                 const unsigned char *sip_key, unsigned char *d)
{
    siphash(buf + r->key_at, r->key_len, sip_key, d, 16);
}

PyObject *klog_key_digest(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    const unsigned char *sip_key;
    Py_buffer view;
    if (nargs != 3 || sip_key_arg(args[1], &sip_key) != OK) {
        PyErr_SetString(PyExc_TypeError, "key_digest(key, sip_key: 16 bytes, outlen)");
        return NULL;
    }
    long outlen = PyLong_AsLong(args[2]);
    if (outlen != 8 && outlen != 16) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "outlen is 8 or 16");
        return NULL;
    }
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    unsigned char d[16];
    siphash(view.buf, view.len, sip_key, d, (int)outlen);
    PyBuffer_Release(&view);
    return PyBytes_FromStringAndSize((const char *)d, outlen);
}

/* table_put(table, key, offset, sip_key) and table_get(table, key, sip_key): one key at a time,
 * for the batches the passes decline (their records decoded by the pure path). */
static int one_key_args(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want,
                        const char *usage, Py_buffer *table_view, Table *t, unsigned char *d)
{
    const unsigned char *sip_key;
    Py_buffer key;
    if (nargs != want || sip_key_arg(args[want - 1], &sip_key) != OK) {
        PyErr_SetString(PyExc_TypeError, usage);
        return FAILED;
    }
    if (PyObject_GetBuffer(args[1], &key, PyBUF_SIMPLE) < 0)
        return FAILED;
    siphash(key.buf, key.len, sip_key, d, 16);
    PyBuffer_Release(&key);
    return table_arg(args[0], table_view, t);
}

PyObject *klog_table_put(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    Table t;
    unsigned char d[16];
    int64_t offset;
    if (one_key_args(args, nargs, 4, "table_put(table, key, offset, sip_key: 16 bytes)", &view,
                     &t, d) != OK)
        return NULL;
    int fresh = -1;
    if (as_int64(args[2], &offset) != OK || offset < 0)
        PyErr_SetString(PyExc_ValueError, "an offset is an int from 0 to 2**63 - 1");
    else
        fresh = table_put(&t, d, offset);
    PyBuffer_Release(&view);
    return fresh < 0 ? NULL : PyBool_FromLong(fresh);
}

PyObject *klog_table_get(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    Table t;
    unsigned char d[16];
    if (one_key_args(args, nargs, 3, "table_get(table, key, sip_key: 16 bytes)", &view, &t, d)
        != OK)
        return NULL;
    int64_t offset = table_get(&t, d);
    PyBuffer_Release(&view);
    return PyLong_FromLongLong(offset);
}

/* table_move(src, dst) -> int: every entry of src put into dst (a larger, empty table: the
 * map grows as keys come); how many. */
PyObject *klog_table_move(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer src_view, dst_view;
    Table src, dst;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "table_move(src, dst)");
        return NULL;
    }
    if (table_arg(args[0], &src_view, &src) != OK)
        return NULL;
    if (table_arg(args[1], &dst_view, &dst) != OK) {
        PyBuffer_Release(&src_view);
        return NULL;
    }
    Py_ssize_t moved = 0;
    int status = OK;
    for (uint64_t i = 0; i < src.n && status == OK; i++) {
        const unsigned char *e = src.slots + i * SLOT_BYTES;
        uint64_t stored = slot_word(e + 16);
        if (stored == 0)
            continue;
        if (table_put(&dst, e, (int64_t)(stored - 1)) < 0)
            status = FAILED;
        else
            moved++;
    }
    PyBuffer_Release(&src_view);
    PyBuffer_Release(&dst_view);
    return status == OK ? PyLong_FromSsize_t(moved) : NULL;
}

/* ---- the passes ---------------------------------------------------------------------------- */

/* map_keys(data, start, end, count, base_offset, base_ts, first_dirty, table, sip_key)
 *     -> new keys (int) | None */
PyObject *klog_map_keys(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view, table_view;
    Table table;
    Py_ssize_t pos, end, count;
    int64_t base_offset, base_ts, first_dirty;
    const unsigned char *sip_key;
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "map_keys takes 9 arguments");
        return NULL;
    }
    if (as_int64(args[6], &first_dirty) != OK || first_dirty < 0
        || sip_key_arg(args[8], &sip_key) != OK) /* offsets below 0 have no slot */
        Py_RETURN_NONE;
    if (table_arg(args[7], &table_view, &table) != OK)
        return NULL;
    if (section_args(args, &view, &pos, &end, &count, &base_offset, &base_ts) != OK) {
        PyBuffer_Release(&table_view);
        Py_RETURN_NONE;
    }
    const unsigned char *buf = view.buf;
    int status = check_section(buf, pos, end, count, base_offset, base_ts, 0);
    Py_ssize_t fresh = 0;
    for (Py_ssize_t i = 0; status == OK && i < count; i++) {
        Rec r;
        unsigned char d[16];
        walk_record(buf, &pos, end, base_offset, base_ts, 0, &r); /* checked above */
        if (r.key_at < 0 || r.offset < first_dirty)
            continue;
        record_digest(buf, &r, sip_key, d);
        int put = table_put(&table, d, r.offset);
        if (put < 0)
            status = FAILED;
        else
            fresh += put;
    }
    PyBuffer_Release(&view);
    PyBuffer_Release(&table_view);
    if (status == FAILED)
        return NULL;
    if (status == FALLBACK)
        Py_RETURN_NONE;
    return PyLong_FromSsize_t(fresh);
}

/* Whether the record stays (key_passes._retained). */
static int retained(const unsigned char *buf, const Rec *r, int64_t latest_offset,
                    const Table *table, const unsigned char *sip_key, int64_t horizon,
                    int log_append_time, int64_t max_timestamp)
{
    if (r->key_at < 0)
        return 0;
    if (r->offset > latest_offset)
        return 1;
    unsigned char d[16];
    record_digest(buf, r, sip_key, d);
    if (table_get(table, d) > r->offset)
        return 0;
    if (r->tombstone)
        return (log_append_time ? max_timestamp : r->timestamp) >= horizon;
    return 1;
}

/* kept_records(data, start, end, count, base_offset, base_ts, latest_offset, table, sip_key,
 *              horizon, log_append_time, max_timestamp) -> (kept, body | None, max_ts) | None */
PyObject *klog_kept_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view, table_view;
    Table table;
    Py_ssize_t pos, end, count;
    int64_t base_offset, base_ts, latest_offset, horizon, max_timestamp;
    const unsigned char *sip_key;
    if (nargs != 12) {
        PyErr_SetString(PyExc_TypeError, "kept_records takes 12 arguments");
        return NULL;
    }
    int log_append_time = PyObject_IsTrue(args[10]);
    if (log_append_time < 0)
        return NULL;
    if (as_int64(args[6], &latest_offset) != OK || sip_key_arg(args[8], &sip_key) != OK
        || as_int64(args[9], &horizon) != OK || as_int64(args[11], &max_timestamp) != OK)
        Py_RETURN_NONE;
    if (table_arg(args[7], &table_view, &table) != OK)
        return NULL;
    if (section_args(args, &view, &pos, &end, &count, &base_offset, &base_ts) != OK) {
        PyBuffer_Release(&table_view);
        Py_RETURN_NONE;
    }
    const unsigned char *buf = view.buf;
    /* kept spans [start, end), adjacent ones merged; at most count of them */
    Py_ssize_t *spans = PyMem_Malloc(sizeof(Py_ssize_t) * 2 * (size_t)(count ? count : 1));
    if (spans == NULL) {
        PyBuffer_Release(&view);
        PyBuffer_Release(&table_view);
        return PyErr_NoMemory();
    }
    int status = OK;
    Py_ssize_t kept = 0, nspans = 0, body_len = 0;
    int64_t max_ts = INT64_MIN;
    for (Py_ssize_t i = 0; i < count; i++) {
        Rec r;
        if (walk_record(buf, &pos, end, base_offset, base_ts, 1, &r)) {
            status = FALLBACK;
            break;
        }
        if (!retained(buf, &r, latest_offset, &table, sip_key, horizon, log_append_time,
                      max_timestamp))
            continue;
        kept++;
        body_len += r.end - r.start;
        if (r.timestamp > max_ts)
            max_ts = r.timestamp;
        if (nspans && spans[2 * nspans - 1] == r.start) {
            spans[2 * nspans - 1] = r.end;
        } else {
            spans[2 * nspans] = r.start;
            spans[2 * nspans + 1] = r.end;
            nspans++;
        }
    }
    PyBuffer_Release(&table_view);
    if (status == OK && pos != end)
        status = FALLBACK;
    PyObject *result = NULL;
    if (status == OK) {
        PyObject *body = NULL;
        if (kept == count || kept == 0) {
            body = Py_NewRef(Py_None);
        } else if ((body = PyBytes_FromStringAndSize(NULL, body_len)) != NULL) {
            char *out = PyBytes_AS_STRING(body);
            for (Py_ssize_t s = 0; s < nspans; s++) {
                Py_ssize_t n = spans[2 * s + 1] - spans[2 * s];
                memcpy(out, buf + spans[2 * s], (size_t)n);
                out += n;
            }
        }
        if (body != NULL)
            result = Py_BuildValue("(nNL)", kept, body, (long long)max_ts);
    }
    PyMem_Free(spans);
    PyBuffer_Release(&view);
    if (status == FALLBACK)
        Py_RETURN_NONE;
    return result;
}
