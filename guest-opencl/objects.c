/* The guest's objects by the worker's handles, the order of event handles,
 * wait lists and queries. */
#define LOG_PREFIX "opencl: "

#include <stdlib.h>
#include <string.h>

#include "icd.h"
#include "log.h"
#include "wire_cl_client.h"

/* Open addressing over 64-bit keys; a freed slot becomes a tombstone. */
struct slot {
	uint64_t key;                   /* 0 free, UINT64_MAX tombstone */
	struct cl_gobj *obj;
};

struct table {
	struct slot *slots;
	size_t cap, used;
};

/* The objects by the worker's handles, and by their addresses: a pointer
 * the application passes is looked up before it is read, so that any 8
 * bytes (a kernel argument's value) can be asked about. */
static pthread_mutex_t map_lock = PTHREAD_MUTEX_INITIALIZER;
static struct table by_handle, by_address;

pthread_mutex_t icd_event_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t event_serial;

static size_t hash(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	return (size_t)h;
}

static struct slot *find_locked(const struct table *t, uint64_t key)
{
	/* The keys that mark free slots and tombstones are no object's (an
	 * application's -1 as a kernel argument must not find a tombstone). */
	if (!t->cap || !key || key == UINT64_MAX)
		return NULL;
	for (size_t i = hash(key) & (t->cap - 1), n = 0; n < t->cap; i = (i + 1) & (t->cap - 1), n++) {
		if (t->slots[i].key == key)
			return &t->slots[i];
		if (!t->slots[i].key)
			return NULL;
	}
	return NULL;
}

static int insert_locked(struct table *t, uint64_t key, struct cl_gobj *o)
{
	if ((t->used + 1) * 4 > t->cap * 3) {
		size_t ncap = t->cap ? t->cap * 2 : 256;
		struct slot *n = calloc(ncap, sizeof(*n));

		if (!n)
			return -1;
		for (size_t i = 0; i < t->cap; i++) {
			if (!t->slots[i].key || t->slots[i].key == UINT64_MAX)
				continue;
			size_t j = hash(t->slots[i].key) & (ncap - 1);

			while (n[j].key)
				j = (j + 1) & (ncap - 1);
			n[j] = t->slots[i];
		}
		free(t->slots);
		t->slots = n;
		t->cap = ncap;
		t->used = 0;
		for (size_t i = 0; i < t->cap; i++)
			t->used += t->slots[i].key != 0;
	}
	size_t i = hash(key) & (t->cap - 1);

	while (t->slots[i].key && t->slots[i].key != UINT64_MAX)
		i = (i + 1) & (t->cap - 1);
	if (!t->slots[i].key)
		t->used++;
	t->slots[i] = (struct slot){ key, o };
	return 0;
}

static void remove_locked(struct table *t, uint64_t key)
{
	struct slot *s = find_locked(t, key);

	if (s)
		*s = (struct slot){ UINT64_MAX, NULL };
}

void *icd_object_new(uint32_t kind, uint64_t handle, size_t bytes)
{
	struct cl_gobj *o = calloc(1, bytes);

	if (!o)
		return NULL;
	o->dispatch = &icd_dispatch;
	o->handle = handle;
	o->kind = kind;
	atomic_init(&o->refs, 1);
	pthread_mutex_lock(&map_lock);
	if (insert_locked(&by_handle, handle, o)) {
		pthread_mutex_unlock(&map_lock);
		free(o);
		return NULL;
	}
	if (insert_locked(&by_address, (uintptr_t)o, o)) {
		remove_locked(&by_handle, handle);
		pthread_mutex_unlock(&map_lock);
		free(o);
		return NULL;
	}
	pthread_mutex_unlock(&map_lock);
	if (kind == WIRE_HANDLE_CL_MEM)
		pthread_mutex_init(&((struct _cl_mem *)o)->lock, NULL);
	if (kind == WIRE_HANDLE_CL_EVENT) {
		pthread_mutex_init(&((struct _cl_event *)o)->lock, NULL);
		pthread_cond_init(&((struct _cl_event *)o)->status_set, NULL);
	}
	return o;
}

static size_t kind_bytes(uint32_t kind)
{
	switch (kind) {
	case WIRE_HANDLE_CL_PLATFORM: return sizeof(struct _cl_platform_id);
	case WIRE_HANDLE_CL_DEVICE: return sizeof(struct _cl_device_id);
	case WIRE_HANDLE_CL_CONTEXT: return sizeof(struct _cl_context);
	case WIRE_HANDLE_CL_QUEUE: return sizeof(struct _cl_command_queue);
	case WIRE_HANDLE_CL_MEM: return sizeof(struct _cl_mem);
	case WIRE_HANDLE_CL_SAMPLER: return sizeof(struct _cl_sampler);
	case WIRE_HANDLE_CL_PROGRAM: return sizeof(struct _cl_program);
	case WIRE_HANDLE_CL_KERNEL: return sizeof(struct _cl_kernel);
	default: return sizeof(struct _cl_event);
	}
}

void *icd_object_of(uint32_t kind, uint64_t handle)
{
	struct cl_gobj *o = NULL;
	struct slot *s;

	if (!handle || (handle >> WIRE_HANDLE_KIND_SHIFT) != kind)
		return NULL;
	pthread_mutex_lock(&map_lock);
	s = find_locked(&by_handle, handle);
	if (s)
		o = s->obj;
	pthread_mutex_unlock(&map_lock);
	if (o)
		return o;
	/* Named by the worker only (a device's default queue): the guest holds
	 * no reference of it, and it lives as long as the process. */
	o = icd_object_new(kind, handle, kind_bytes(kind));
	if (o)
		atomic_store(&o->refs, 0);
	return o;
}

void icd_object_free(void *p)
{
	struct cl_gobj *o = p;

	pthread_mutex_lock(&map_lock);
	remove_locked(&by_handle, o->handle);
	remove_locked(&by_address, (uintptr_t)o);
	pthread_mutex_unlock(&map_lock);
	o->dispatch = NULL;
	o->handle = 0;
	free(o);
}

bool icd_object_valid(const void *p, uint32_t kind)
{
	const struct slot *s;
	bool ok;

	/* Read only once known to be one of ours: a released object, a foreign
	 * pointer or any other value is not in the table. */
	pthread_mutex_lock(&map_lock);
	s = p ? find_locked(&by_address, (uintptr_t)p) : NULL;
	ok = s && s->obj->kind == kind;
	pthread_mutex_unlock(&map_lock);
	return ok;
}

uint64_t icd_event_next(void)
{
	return ((uint64_t)WIRE_HANDLE_CL_EVENT << WIRE_HANDLE_KIND_SHIFT) | ++event_serial;
}

cl_int icd_waits(cl_uint n, const cl_event *list, uint8_t *buf, size_t cap_records, uint8_t **heap,
		 struct wire_blob *out)
{
	*heap = NULL;
	*out = (struct wire_blob){ NULL, 0 };
	if ((n == 0) != (list == NULL))
		return CL_INVALID_EVENT_WAIT_LIST;
	if (!n)
		return CL_SUCCESS;
	if (n > WIRE_REC_CL_HANDLE_MAX)
		return CL_INVALID_EVENT_WAIT_LIST;
	if (n > cap_records) {
		*heap = malloc((size_t)n * WIRE_REC_CL_HANDLE_BYTES);
		if (!*heap)
			return CL_OUT_OF_HOST_MEMORY;
		buf = *heap;
	}
	for (cl_uint i = 0; i < n; i++) {
		if (!icd_object_valid(list[i], WIRE_HANDLE_CL_EVENT)) {
			free(*heap);
			*heap = NULL;
			return CL_INVALID_EVENT_WAIT_LIST;
		}
		wire_rec_cl_handle_put(buf, i, &(struct wire_rec_cl_handle){ list[i]->o.handle });
	}
	*out = (struct wire_blob){ buf, n * WIRE_REC_CL_HANDLE_BYTES };
	return CL_SUCCESS;
}

cl_int icd_info_answer(const void *data, size_t bytes, size_t size, void *value, size_t *size_ret)
{
	if (value && size < bytes)
		return CL_INVALID_VALUE;
	if (value && bytes)
		memcpy(value, data, bytes);
	if (size_ret)
		*size_ret = bytes;
	return CL_SUCCESS;
}

cl_int icd_info(uint32_t query, uint64_t object, uint64_t other, cl_uint param, const void *input,
		size_t input_size, size_t size, void *value, size_t *size_ret)
{
	struct wire_cl_get_info_req req = { query, object, other, param, { input, (uint32_t)input_size } };
	struct wire_cl_get_info_rep rep;
	uint8_t *copy;
	int n;
	cl_int ret = rpc_cl_get_info(&req, &rep);

	if (ret != CL_SUCCESS)
		return ret;
	n = wire_rec_cl_handle_at_count(rep.handles);
	if (n < 0)
		return CL_OUT_OF_RESOURCES;
	copy = malloc(rep.value.len ? rep.value.len : 1);
	if (!copy)
		return CL_OUT_OF_HOST_MEMORY;
	memcpy(copy, rep.value.ptr, rep.value.len);
	for (int i = 0; i < n; i++) {
		struct wire_rec_cl_handle_at at;
		uint64_t h;
		void *o;

		if (wire_rec_cl_handle_at_get(rep.handles, (uint32_t)i, &at) || at.offset > rep.value.len ||
		    rep.value.len - at.offset < sizeof(h)) {
			free(copy);
			return CL_OUT_OF_RESOURCES;
		}
		memcpy(&h, copy + at.offset, sizeof(h));
		o = icd_object_of(at.kind, h);
		memcpy(copy + at.offset, &o, sizeof(o));
	}
	ret = icd_info_answer(copy, rep.value.len, size, value, size_ret);
	free(copy);
	return ret;
}
