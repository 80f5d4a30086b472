/* klog.producer._sendc: the producer's send() for its commonest call, compiled.
 *
 * `producer.send(topic, value)` with a bytes value, no key, headers, partition or timestamp,
 * to a topic whose sticky batch (KIP-480) is open and has room, does what the Python path
 * does (klog/producer/blocking.py `Producer.send` -> `ProducerProtocol.append` ->
 * `Accumulator.append_sticky`): under the producer's lock, it appends the tuple
 * (timestamp_ms, None, value, None) to the batch's records, adds the record's size to the
 * batch's and the accumulator's, and returns FutureRecordMetadata(batch, index). Every other
 * call, and every case the Python path would treat otherwise (no open sticky batch, a batch
 * sealed, full or holding send_batch segments, the buffer full, the lock held by the sender
 * thread, the producer closed), goes to the Python send with the same arguments. Why: a
 * Python send() costs about 1.2 us per record of interpreter work, librdkafka's produce()
 * about 0.7 us in all; this path does the same bookkeeping without the interpreter.
 *
 * `producer.send_batch(topic, values)` (the blocking producer's, and the append of the
 * asyncio producer's `await send_batch`), with a list or tuple of bytes values, no key,
 * headers, partition or timestamp, is the same case for many records: when they all fit in
 * the open sticky batch, which already holds a record, it stores them as
 * `Accumulator.append_many` does (one segment (timestamp_ms, None, list(values), None)), and
 * returns the producer's list handle holding [(batch, first index, count)]. Why: the Python call
 * costs 8-10 us of interpreter work per call of 50 values, under the producer's GIL, which
 * the sender thread's encoding needs at the same time.
 *
 * The lock is taken without blocking: when the sender thread holds it, the Python path waits
 * for it as before. Nothing here runs Python code between the acquire and the release (the
 * objects touched are the producer's own: a dict, a list, __slots__ and plain attributes,
 * and ints), so no other thread can see a half-made append.
 */

#define _POSIX_C_SOURCE 200809L
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <time.h>

typedef struct {
    PyObject_HEAD
    PyObject *slow;          /* the Python send, called for everything not handled here */
    PyObject *acquire;       /* the producer lock's acquire and release */
    PyObject *release;
    PyObject *sticky;        /* Accumulator._sticky: topic -> the batch keyless records join */
    PyObject *leaders;       /* ClusterMetadata.leaders: a topic whose metadata is known */
    PyObject *accumulator;   /* its buffered_bytes */
    PyTypeObject *future_type; /* FutureRecordMetadata: a tuple (batch, index) */
    PyTypeObject *batch_type;  /* ProducerBatch, whose __slots__ are read in place */
    Py_ssize_t slots[5];       /* their offsets: records, size, sealed, segments, segment_count */
    PyObject *slow_batch;      /* the Python send_batch (None: send_batch always goes there) */
    PyTypeObject *list_type;   /* FutureRecordMetadataList, its one slot set in place */
    Py_ssize_t spans_slot;     /* ... the offset of its _spans */
    Py_ssize_t buffered_slot;  /* Accumulator.buffered_bytes's offset (its __slots__) */
    Py_ssize_t batch_size;
    Py_ssize_t max_request_size;
    Py_ssize_t buffer_memory;
    Py_ssize_t overhead;     /* accumulator.RECORD_OVERHEAD */
    int enabled;
    unsigned long long taken;   /* calls this path handled */
    unsigned long long passed;  /* calls handed to the Python send */
    unsigned long long batch_taken;  /* the same two of send_batch */
    unsigned long long batch_passed;
} FastSend;


static PyObject *
pass_on(FastSend *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    self->passed++;
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

static int
release(FastSend *self)
{
    PyObject *r = PyObject_CallNoArgs(self->release);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* ProducerBatch's __slots__, read and written in place (a member descriptor's offset), as
 * the interpreter itself does: four attribute lookups per record cost more than the rest. */
enum { SLOT_RECORDS, SLOT_SIZE, SLOT_SEALED, SLOT_SEGMENTS, SLOT_SEGMENT_COUNT, SLOTS };
static const char *slot_names[SLOTS] = {"records", "size", "sealed", "segments",
                                        "segment_count"};

static inline PyObject **
slot(FastSend *self, PyObject *batch, int which)
{
    return (PyObject **)((char *)batch + self->slots[which]);
}

/* A Python int that must be a non-negative Py_ssize_t: the value, or -2 if it is not one. */
static Py_ssize_t
as_size(PyObject *v)
{
    if (v == NULL || !PyLong_CheckExact(v))
        return -2;
    Py_ssize_t n = PyLong_AsSsize_t(v);
    if (n == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -2;
    }
    return n < 0 ? -2 : n;
}

/* 1: appended, *out is the future; 0: not this path's case; -1: error set. Called with the
 * lock held. Every object is made before anything changes, so an allocation that fails (or
 * runs the cyclic GC) leaves the batch as it was. */
/* What a call appends: a topic, the value (send) or the list or tuple of values
 * (send_batch), how many records, and their size as the accumulator counts it. */
typedef struct {
    PyObject *topic;
    PyObject *values;
    Py_ssize_t count;
    Py_ssize_t size;
} Append;

/* The open sticky batch a call may append to, as read under the lock. */
typedef struct {
    PyObject *batch;          /* borrowed */
    Py_ssize_t batch_bytes;   /* its size */
    PyObject **buffered_slot; /* the accumulator's buffered_bytes, in place */
    Py_ssize_t buffered;
} Open;

/* 1: the topic (its metadata known) has an open sticky batch with room for `what`, and the
 * buffer is not full: *open says which; 0: not this path's case; -1: error set. */
static int
open_batch(FastSend *self, const Append *what, Open *open)
{
    int known = PyDict_Contains(self->leaders, what->topic);
    if (known <= 0)
        return known;
    PyObject *batch = PyDict_GetItemWithError(self->sticky, what->topic); /* borrowed */
    if (batch == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (Py_TYPE(batch) != self->batch_type || *slot(self, batch, SLOT_SEALED) != Py_False)
        return 0;
    Py_ssize_t batch_bytes = as_size(*slot(self, batch, SLOT_SIZE));
    if (batch_bytes == -2 || batch_bytes + what->size > self->batch_size)
        return 0;
    PyObject **buffered_slot = (PyObject **)((char *)self->accumulator + self->buffered_slot);
    Py_ssize_t buffered = as_size(*buffered_slot);
    if (buffered == -2 || buffered >= self->buffer_memory)
        return 0;
    *open = (Open){batch, batch_bytes, buffered_slot, buffered};
    return 1;
}

/* The wall clock in milliseconds, as the Python path's time.time_ns() // 1_000_000. */
static PyObject *
now_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return PyLong_FromLongLong((long long)now.tv_sec * 1000 + now.tv_nsec / 1000000);
}

static int
append_locked(FastSend *self, const Append *what, PyObject **out)
{
    Open open;
    int found = open_batch(self, what, &open);
    if (found <= 0)
        return found;
    PyObject *batch = open.batch, *value = what->values, **buffered_slot = open.buffered_slot;
    Py_ssize_t size = what->size, batch_bytes = open.batch_bytes, buffered = open.buffered;
    PyObject *segments = *slot(self, batch, SLOT_SEGMENTS);
    if (segments != Py_None &&
        !(segments != NULL && PyList_CheckExact(segments) && PyList_GET_SIZE(segments) == 0))
        return 0;
    PyObject *records = *slot(self, batch, SLOT_RECORDS);
    /* an empty batch: the Python path wakes the sender for it */
    if (records == NULL || !PyList_CheckExact(records) || PyList_GET_SIZE(records) == 0)
        return 0;

    PyObject *record = PyTuple_New(4);
    PyObject *stamp = now_ms();
    PyObject *index = PyLong_FromSsize_t(PyList_GET_SIZE(records));
    PyObject *new_size = PyLong_FromSsize_t(batch_bytes + size);
    PyObject *new_buffered = PyLong_FromSsize_t(buffered + size);
    PyObject *future = self->future_type->tp_alloc(self->future_type, 2);
    if (!record || !stamp || !index || !new_size || !new_buffered || !future)
        goto error;
    /* the allocations above may have run the GC (and a finalizer): the batch must still be
     * open, with the records list we read */
    if (*slot(self, batch, SLOT_RECORDS) != records || *slot(self, batch, SLOT_SEALED) != Py_False
        || as_size(*buffered_slot) != buffered || as_size(*slot(self, batch, SLOT_SIZE)) != batch_bytes) {
        Py_DECREF(record); Py_DECREF(stamp); Py_DECREF(index);
        Py_DECREF(new_size); Py_DECREF(new_buffered); Py_DECREF(future);
        return 0;
    }
    PyTuple_SET_ITEM(record, 0, stamp);
    Py_INCREF(Py_None);
    PyTuple_SET_ITEM(record, 1, Py_None);
    Py_INCREF(value);
    PyTuple_SET_ITEM(record, 2, value);
    Py_INCREF(Py_None);
    PyTuple_SET_ITEM(record, 3, Py_None);
    PyObject_GC_UnTrack(record); /* atoms only: it can be in no cycle, keep it off the GC's list */
    Py_INCREF(batch);
    PyTuple_SET_ITEM(future, 0, batch);
    PyTuple_SET_ITEM(future, 1, index);
    if (PyList_Append(records, record) < 0) { /* the list unchanged: a failed resize */
        Py_DECREF(record); Py_DECREF(new_size); Py_DECREF(new_buffered); Py_DECREF(future);
        return -1;
    }
    Py_DECREF(record);
    Py_SETREF(*slot(self, batch, SLOT_SIZE), new_size);
    Py_SETREF(*buffered_slot, new_buffered);
    *out = future;
    return 1;
error:
    Py_XDECREF(record);
    Py_XDECREF(stamp);
    Py_XDECREF(index);
    Py_XDECREF(new_size);
    Py_XDECREF(new_buffered);
    Py_XDECREF(future);
    return -1;
}

/* `append` under the producer's lock, taken without waiting: 1 appended (*out set), 0 not
 * this path's case (the lock held by another thread, the producer closed, ...), -1 error
 * set. A lock that would not release is an error, though the records are queued. */
static int
under_lock(FastSend *self, int (*append)(FastSend *, const Append *, PyObject **),
           const Append *what, PyObject **out)
{
    PyObject *got = PyObject_CallOneArg(self->acquire, Py_False);
    if (got == NULL)
        return -1;
    int locked = got == Py_True;
    Py_DECREF(got);
    if (!locked)
        return 0;
    int appended = self->enabled ? append(self, what, out) : 0;
    if (appended < 0) {
        PyObject *type, *exc, *tb;
        PyErr_Fetch(&type, &exc, &tb);
        release(self);
        PyErr_Restore(type, exc, tb);
        return -1;
    }
    if (release(self) < 0) {
        Py_CLEAR(*out);
        return -1;
    }
    return appended;
}

static PyObject *
FastSend_send(FastSend *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (!self->enabled || nargs != 2 || kwnames != NULL)
        return pass_on(self, args, nargsf, kwnames);
    PyObject *topic = args[0], *value = args[1];
    if (!PyUnicode_CheckExact(topic) || !PyBytes_CheckExact(value))
        return pass_on(self, args, nargsf, kwnames);
    Py_ssize_t size = self->overhead + PyBytes_GET_SIZE(value);
    if (size > self->max_request_size)
        return pass_on(self, args, nargsf, kwnames);
    PyObject *future = NULL;
    Append what = {topic, value, 1, size};
    int appended = under_lock(self, append_locked, &what, &future);
    if (appended < 0)
        return NULL;
    if (!appended)
        return pass_on(self, args, nargsf, kwnames);
    self->taken++;
    return future;
}

/* send_batch(topic, values): the values (every one bytes) as one segment of the sticky batch,
 * as `Accumulator.append_many` stores them when they all fit (klog/producer/batch.py
 * `add_segment`): the tuple (timestamp_ms, None, list(values), None) appended to the batch's
 * segments, the batch's segment_count, size and the accumulator's buffered_bytes grown, and
 * the spans [(batch, first index, count)] that FutureRecordMetadataList holds. 1: appended,
 * *out the spans; 0: not this path's case (an empty batch, one without room, ...); -1: error
 * set. Called with the lock held; nothing changes until every object is made. */
static int
append_batch_locked(FastSend *self, const Append *what, PyObject **out)
{
    Open open;
    int found = open_batch(self, what, &open);
    if (found <= 0)
        return found;
    PyObject *batch = open.batch, *values = what->values, **buffered_slot = open.buffered_slot;
    Py_ssize_t count = what->count, size = what->size, batch_bytes = open.batch_bytes;
    Py_ssize_t buffered = open.buffered;
    PyObject *records = *slot(self, batch, SLOT_RECORDS);
    PyObject *segments = *slot(self, batch, SLOT_SEGMENTS);
    if (records == NULL || !PyList_CheckExact(records) || segments == NULL ||
        (segments != Py_None && !PyList_CheckExact(segments)))
        return 0;
    Py_ssize_t segment_count = as_size(*slot(self, batch, SLOT_SEGMENT_COUNT));
    if (segment_count == -2)
        return 0;
    Py_ssize_t first = PyList_GET_SIZE(records) + segment_count;
    if (first == 0) /* an empty batch: the Python path wakes the sender for it */
        return 0;

    PyObject *copy = PySequence_List(values);
    PyObject *segment = PyTuple_New(4);
    PyObject *stamp = now_ms();
    PyObject *made = segments == Py_None ? PyList_New(0) : NULL;
    PyObject *new_size = PyLong_FromSsize_t(batch_bytes + size);
    PyObject *new_buffered = PyLong_FromSsize_t(buffered + size);
    PyObject *new_count = PyLong_FromSsize_t(segment_count + count);
    PyObject *span = Py_BuildValue("(Onn)", batch, first, count);
    PyObject *spans = PyList_New(1);
    if (!copy || !segment || !stamp || (segments == Py_None && !made) || !new_size ||
        !new_buffered || !new_count || !span || !spans)
        goto error;
    PyTuple_SET_ITEM(segment, 0, stamp);
    stamp = NULL;
    Py_INCREF(Py_None);
    PyTuple_SET_ITEM(segment, 1, Py_None);
    PyTuple_SET_ITEM(segment, 2, copy);
    copy = NULL;
    Py_INCREF(Py_None);
    PyTuple_SET_ITEM(segment, 3, Py_None);
    /* the copy holds bytes only, the segment atoms and the copy: neither can be in a cycle,
     * so they stay off the GC's lists (a batch's segments live until it is acknowledged) */
    PyObject_GC_UnTrack(PyTuple_GET_ITEM(segment, 2));
    PyObject_GC_UnTrack(segment);
    PyList_SET_ITEM(spans, 0, span);
    span = NULL;
    /* the allocations above may have run the GC (and a finalizer): the batch must still be
     * as we read it */
    if (*slot(self, batch, SLOT_RECORDS) != records || *slot(self, batch, SLOT_SEALED) != Py_False
        || *slot(self, batch, SLOT_SEGMENTS) != segments
        || PyList_GET_SIZE(records) + segment_count != first
        || as_size(*slot(self, batch, SLOT_SEGMENT_COUNT)) != segment_count
        || as_size(*buffered_slot) != buffered
        || as_size(*slot(self, batch, SLOT_SIZE)) != batch_bytes) {
        Py_DECREF(segment); Py_XDECREF(made); Py_DECREF(new_size); Py_DECREF(new_buffered);
        Py_DECREF(new_count); Py_DECREF(spans);
        return 0;
    }
    if (PyList_Append(made != NULL ? made : segments, segment) < 0) /* a failed resize */
        goto error;
    Py_DECREF(segment);
    if (made != NULL)
        Py_SETREF(*slot(self, batch, SLOT_SEGMENTS), made);
    Py_SETREF(*slot(self, batch, SLOT_SEGMENT_COUNT), new_count);
    Py_SETREF(*slot(self, batch, SLOT_SIZE), new_size);
    Py_SETREF(*buffered_slot, new_buffered);
    *out = spans;
    return 1;
error:
    Py_XDECREF(copy);
    Py_XDECREF(segment);
    Py_XDECREF(stamp);
    Py_XDECREF(made);
    Py_XDECREF(new_size);
    Py_XDECREF(new_buffered);
    Py_XDECREF(new_count);
    Py_XDECREF(span);
    Py_XDECREF(spans);
    return -1;
}

static PyObject *
pass_batch(FastSend *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    self->batch_passed++;
    return PyObject_Vectorcall(self->slow_batch, args, nargsf, kwnames);
}

static PyObject *
FastSend_send_batch(FastSend *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (self->slow_batch == NULL || self->slow_batch == Py_None) {
        PyErr_SetString(PyExc_TypeError, "this FastSend was made without a slow_batch");
        return NULL;
    }
    if (!self->enabled || nargs != 2 || kwnames != NULL || !PyUnicode_CheckExact(args[0]))
        return pass_batch(self, args, nargsf, kwnames);
    PyObject *topic = args[0], *values = args[1];
    if (!PyList_CheckExact(values) && !PyTuple_CheckExact(values))
        return pass_batch(self, args, nargsf, kwnames);
    Py_ssize_t count = PySequence_Fast_GET_SIZE(values), total = 0;
    PyObject **items = PySequence_Fast_ITEMS(values);
    if (count == 0 || count > self->batch_size)
        return pass_batch(self, args, nargsf, kwnames);
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!PyBytes_CheckExact(items[i]))
            return pass_batch(self, args, nargsf, kwnames);
        total += PyBytes_GET_SIZE(items[i]);
    }
    Py_ssize_t size = total + self->overhead * count;
    if (size > self->batch_size)
        return pass_batch(self, args, nargsf, kwnames);
    /* made before the lock: once the records are in a batch, the call must not fail */
    PyObject *handle = self->list_type->tp_alloc(self->list_type, 0);
    if (handle == NULL)
        return NULL;
    PyObject *spans = NULL;
    Append what = {topic, values, count, size};
    int appended = under_lock(self, append_batch_locked, &what, &spans);
    if (appended <= 0) {
        Py_DECREF(handle);
        return appended < 0 ? NULL : pass_batch(self, args, nargsf, kwnames);
    }
    *(PyObject **)((char *)handle + self->spans_slot) = spans; /* the reference moves */
    self->batch_taken++;
    return handle;
}

static PyObject *
FastSend_disable(FastSend *self, PyObject *unused)
{
    self->enabled = 0;
    Py_RETURN_NONE;
}

static PyObject *
FastSend_counts(FastSend *self, PyObject *unused)
{
    return Py_BuildValue("(KK)", self->taken, self->passed);
}

static int
FastSend_init(FastSend *self, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"slow", "lock", "sticky", "leaders", "accumulator", "future_type",
                            "batch_type", "batch_size", "max_request_size", "buffer_memory",
                            "overhead", "slow_batch", "list_type", NULL};
    PyObject *slow, *lock, *sticky, *leaders, *accumulator, *future_type, *batch_type;
    PyObject *slow_batch = Py_None, *list_type = NULL;
    Py_ssize_t batch_size, max_request_size, buffer_memory, overhead;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO!O!OO!O!nnnn|OO!", names, &slow, &lock,
                                     &PyDict_Type, &sticky, &PyDict_Type, &leaders,
                                     &accumulator, &PyType_Type, &future_type, &PyType_Type,
                                     &batch_type, &batch_size, &max_request_size,
                                     &buffer_memory, &overhead, &slow_batch, &PyType_Type,
                                     &list_type))
        return -1;
    if (slow_batch != Py_None) { /* send_batch handled too: the handle's _spans slot */
        PyObject *spans = list_type == NULL ? NULL :
            PyDict_GetItemString(((PyTypeObject *)list_type)->tp_dict, "_spans");
        if (spans == NULL || !Py_IS_TYPE(spans, &PyMemberDescr_Type) ||
            ((PyMemberDescrObject *)spans)->d_member->type != T_OBJECT_EX) {
            PyErr_SetString(PyExc_TypeError,
                            "slow_batch needs a list_type with the __slots__ member _spans");
            return -1;
        }
        self->spans_slot = ((PyMemberDescrObject *)spans)->d_member->offset;
        Py_INCREF(list_type);
        Py_XSETREF(self->list_type, (PyTypeObject *)list_type);
    }
    Py_INCREF(slow_batch);
    Py_XSETREF(self->slow_batch, slow_batch);
    for (int i = 0; i < SLOTS; i++) {
        PyObject *descr = PyDict_GetItemString(((PyTypeObject *)batch_type)->tp_dict,
                                               slot_names[i]);
        if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type) ||
            ((PyMemberDescrObject *)descr)->d_member->type != T_OBJECT_EX) {
            PyErr_Format(PyExc_TypeError, "batch_type has no __slots__ member %s",
                         slot_names[i]);
            return -1;
        }
        self->slots[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
    }
    PyObject *descr = PyDict_GetItemString(Py_TYPE(accumulator)->tp_dict, "buffered_bytes");
    if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type) ||
        ((PyMemberDescrObject *)descr)->d_member->type != T_OBJECT_EX) {
        PyErr_SetString(PyExc_TypeError, "accumulator has no __slots__ member buffered_bytes");
        return -1;
    }
    self->buffered_slot = ((PyMemberDescrObject *)descr)->d_member->offset;
    if (!PyType_IsSubtype((PyTypeObject *)future_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "future_type must be a tuple subclass");
        return -1;
    }
    PyObject *acquire = PyObject_GetAttrString(lock, "acquire");
    if (acquire == NULL)
        return -1;
    PyObject *release_ = PyObject_GetAttrString(lock, "release");
    if (release_ == NULL) {
        Py_DECREF(acquire);
        return -1;
    }
    Py_XSETREF(self->acquire, acquire);
    Py_XSETREF(self->release, release_);
    Py_INCREF(slow);
    Py_XSETREF(self->slow, slow);
    Py_INCREF(sticky);
    Py_XSETREF(self->sticky, sticky);
    Py_INCREF(leaders);
    Py_XSETREF(self->leaders, leaders);
    Py_INCREF(accumulator);
    Py_XSETREF(self->accumulator, accumulator);
    Py_INCREF(future_type);
    Py_XSETREF(self->future_type, (PyTypeObject *)future_type);
    Py_INCREF(batch_type);
    Py_XSETREF(self->batch_type, (PyTypeObject *)batch_type);
    self->batch_size = batch_size;
    self->max_request_size = max_request_size;
    self->buffer_memory = buffer_memory;
    self->overhead = overhead;
    self->enabled = 1;
    return 0;
}

static int
FastSend_traverse(FastSend *self, visitproc visit, void *arg)
{
    Py_VISIT(self->slow);
    Py_VISIT(self->acquire);
    Py_VISIT(self->release);
    Py_VISIT(self->sticky);
    Py_VISIT(self->leaders);
    Py_VISIT(self->accumulator);
    Py_VISIT(self->future_type);
    Py_VISIT(self->batch_type);
    Py_VISIT(self->slow_batch);
    Py_VISIT(self->list_type);
    return 0;
}

static int
FastSend_clear(FastSend *self)
{
    Py_CLEAR(self->slow);
    Py_CLEAR(self->acquire);
    Py_CLEAR(self->release);
    Py_CLEAR(self->sticky);
    Py_CLEAR(self->leaders);
    Py_CLEAR(self->accumulator);
    Py_CLEAR(self->future_type);
    Py_CLEAR(self->batch_type);
    Py_CLEAR(self->slow_batch);
    Py_CLEAR(self->list_type);
    return 0;
}

static void
FastSend_dealloc(FastSend *self)
{
    PyObject_GC_UnTrack(self);
    FastSend_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
FastSend_batch_counts(FastSend *self, PyObject *unused)
{
    return Py_BuildValue("(KK)", self->batch_taken, self->batch_passed);
}

static PyMethodDef FastSend_methods[] = {
    {"send", (PyCFunction)(void (*)(void))FastSend_send, METH_FASTCALL | METH_KEYWORDS,
     "send(topic, value, ...): as Producer.send"},
    {"send_batch", (PyCFunction)(void (*)(void))FastSend_send_batch,
     METH_FASTCALL | METH_KEYWORDS, "send_batch(topic, values, ...): as Producer.send_batch"},
    {"disable", (PyCFunction)FastSend_disable, METH_NOARGS,
     "every later call goes to the Python send (the producer closes)"},
    {"counts", (PyCFunction)FastSend_counts, METH_NOARGS,
     "(calls handled here, calls handed to the Python send)"},
    {"batch_counts", (PyCFunction)FastSend_batch_counts, METH_NOARGS,
     "(send_batch calls handled here, send_batch calls handed to the Python send_batch)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FastSendType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "klog.producer._sendc.FastSend",
    .tp_basicsize = sizeof(FastSend),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A producer's send() for send(topic, bytes) to an open sticky batch.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)FastSend_init,
    .tp_traverse = (traverseproc)FastSend_traverse,
    .tp_clear = (inquiry)FastSend_clear,
    .tp_dealloc = (destructor)FastSend_dealloc,
    .tp_methods = FastSend_methods,
};

/* bytes_total(values): the sum of the lengths when every item of the list or tuple is a
 * bytes object, else None. send_batch's check and size of its values in one pass: in
 * Python (a set of the types, then sum(map(len, ...))) they cost 6 us for 50 values, most
 * of a send_batch call. */
static PyObject *
bytes_total(PyObject *module, PyObject *values)
{
    if (!PyList_CheckExact(values) && !PyTuple_CheckExact(values))
        Py_RETURN_NONE;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(values), total = 0;
    PyObject **items = PySequence_Fast_ITEMS(values);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyBytes_CheckExact(items[i]))
            Py_RETURN_NONE;
        total += PyBytes_GET_SIZE(items[i]);
    }
    return PyLong_FromSsize_t(total);
}

static PyMethodDef module_methods[] = {
    {"bytes_total", (PyCFunction)bytes_total, METH_O,
     "bytes_total(values): the total length if every value is bytes, else None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "klog.producer._sendc",
    .m_doc = "The producer's compiled send() (klog/producer/fast_send.py says when it is used).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__sendc(void)
{
    if (PyType_Ready(&FastSendType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&FastSendType);
    if (PyModule_AddObject(m, "FastSend", (PyObject *)&FastSendType) < 0) {
        Py_DECREF(&FastSendType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
