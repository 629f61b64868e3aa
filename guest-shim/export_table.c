/* The driver's export tables, answered by the guest shim.
 *
 * The runtime finds each table by UUID and calls its slots by index, so a table
 * must have the driver's exact length, size word and NULL holes. Slots whose
 * behaviour was measured are implemented; every other slot is a stub that logs
 * its table and slot once and returns CUDA_ERROR_NOT_SUPPORTED. The facts and
 * how they were measured are in docs/export-tables.md.
 *
 * State here is process-wide on purpose: the runtime calls a slot as a plain
 * function with no context argument, so a slot can only reach static state.
 */
#define LOG_PREFIX "export: "

#include "export_table.h"
#include "shim.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

enum export_id {
	EXPORT_TOOLS_CONTEXT,    /* 21318c60... */
	EXPORT_CONTEXT_CHECKS,   /* 263e8860... */
	EXPORT_TOOLS_TLS,        /* 42d85a81... */
	EXPORT_TORCH_ONLY,       /* 69a28e9f..., asked for by PyTorch only */
	EXPORT_CUDART,           /* 6bd5fb6c... */
	EXPORT_CALLBACK_HOOKS,   /* a094798c... */
	EXPORT_CONTEXT_STORAGE,  /* c693336e... */
	EXPORT_INTEGRITY,        /* d4082055... */
	EXPORT_F8CFF951,         /* f8cff951..., purpose unknown */
	EXPORT_TOOLS_MODULE,     /* 6e163fbe..., asked for by cuFFT */
	EXPORT_1734DC26,         /* 1734dc26..., asked for by cuBLASLt */
	EXPORT_COUNT,
};

/* Longest table: 21318c60 has 93 words on driver 580. */
#define EXPORT_MAX_WORDS 93

struct export_slot {
	unsigned index;
	const void *fn;          /* NULL leaves a hole, as the driver has */
};

struct export_desc {
	const char *name;        /* first 8 hex digits, for log lines */
	uint8_t uuid[16];
	unsigned words;          /* length, size word included */
	bool size_word;          /* word 0 holds words * 8 */
	const struct export_slot *slots;
	unsigned nslots;
};

/* ---- 21318c60: tools context ---- */

/* Driver 580 writes the context's id, equal to cuCtxGetId's; cuBLASLt calls it
 * before its first GEMM and gives up with NOT_SUPPORTED without it. */
static CUresult tools_context_id(CUcontext ctx, unsigned long long *id)
{
	if (!id)
		return CUDA_ERROR_INVALID_VALUE;
	return cuCtxGetId(ctx, id);
}

/* cuBLAS keys its per-stream workspace by what slots 51 and 39 give: it
 * calls slot 51 as (ctx, stream, &object, stream == CU_STREAM_PER_THREAD),
 * then slot 39 as (ctx, object, &id), and compares the id with the ones it
 * has seen (without slot 51 every cublasSgemm that wants a workspace fails
 * with CUBLAS_STATUS_INTERNAL_ERROR). The object is only handed back to slot
 * 39, so ours is the stream handle itself (the NULL stream as the legacy
 * one, which it is) and the id cuStreamGetId's, which tells streams apart. */
static CUresult tools_context_stream(CUcontext ctx, CUstream stream, CUstream *out, int per_thread)
{
	(void)ctx;
	(void)per_thread;       /* the handle says it already */
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	*out = stream ? stream : CU_STREAM_LEGACY;
	return CUDA_SUCCESS;
}

static CUresult tools_context_stream_id(CUcontext ctx, CUstream stream, unsigned long long *id)
{
	(void)ctx;
	if (!id)
		return CUDA_ERROR_INVALID_VALUE;
	return cuStreamGetId(stream, id);
}

/* ---- 263e8860: context checks ---- */

/* Driver 580 answers 0 and *flags = 0 for the primary context, current or not,
 * and leaves *detail alone. */
static CUresult checks_context(CUcontext ctx, unsigned *flags, const void **detail)
{
	pr_debug("263e8860[2](ctx=%p, flags=%p, detail=%p)", (void *)ctx, (void *)flags, (void *)detail);
	if (flags)
		*flags = 0;
	return CUDA_SUCCESS;
}

/* Called by the runtime at start-up; driver 580 returns 0 with or without a context. */
static unsigned checks_global(void)
{
	pr_debug("263e8860[3]() -> 0");
	return 0;
}

/* ---- 42d85a81: tools thread-local state ---- */

/* Driver 580 writes the calling thread's current context (NULL when none). */
static CUresult tls_current_context(CUcontext *out)
{
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	return cuCtxGetCurrent(out);
}

/* ---- 6bd5fb6c: runtime interface ---- */

/* The driver hands out the primary context of dev without retaining it; the
 * runtime retains it itself (cuDevicePrimaryCtxRetain) when it starts work. */
static CUresult cudart_primary_context(CUcontext *pctx, CUdevice dev)
{
	static atomic_bool warned;
	unsigned flags;
	int active;
	CUresult rc;

	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (context_primary_peek) {
		rc = context_primary_peek(dev, pctx);
		goto out;
	}
	rc = cuDevicePrimaryCtxGetState(dev, &flags, &active);
	if (rc != CUDA_SUCCESS)
		goto out;
	rc = cuDevicePrimaryCtxRetain(pctx, dev);
	if (rc != CUDA_SUCCESS || !active) {
		/* Releasing an inactive context's only reference would destroy it. */
		if (rc == CUDA_SUCCESS && !atomic_exchange(&warned, true))
			pr_info("6bd5fb6c[2]: primary context of device %d retained once more than the driver would", dev);
		goto out;
	}
	rc = cuDevicePrimaryCtxRelease_v2(dev);
out:
	pr_debug("6bd5fb6c[2](dev=%d) -> %d ctx=%p", dev, rc, rc == CUDA_SUCCESS ? (void *)*pctx : NULL);
	return rc;
}

/* ---- a094798c: tools runtime callback hooks ---- */

/* Two zeroed buffers the runtime may use; driver 580 reports 1024 and 14 and
 * hands out its own static memory. The unit is unknown, so each buffer has
 * room for that many 8-byte words. */
static uint64_t hooks_buffer1[1024];
static uint64_t hooks_buffer2[14];

static void hooks_get_buffer1(void **ptr, size_t *size)
{
	pr_debug("a094798c[2](%p, %p)", (void *)ptr, (void *)size);
	if (ptr)
		*ptr = hooks_buffer1;
	if (size)
		*size = 1024;
}

static void hooks_get_buffer2(void **ptr, size_t *size)
{
	pr_debug("a094798c[6](%p, %p)", (void *)ptr, (void *)size);
	if (ptr)
		*ptr = hooks_buffer2;
	if (size)
		*size = 14;
}

/* ---- c693336e: context-local storage ---- */

typedef void (*storage_dtor_fn)(CUcontext ctx, void *key, void *value);

struct storage_entry {
	CUcontext ctx;
	void *key;
	void *value;
	storage_dtor_fn dtor;
	struct storage_entry *next;
};

/* Newest first, so destructors run in reverse order of insertion as the driver's do. */
static struct {
	pthread_mutex_t lock;
	struct storage_entry *head;
} storage = { PTHREAD_MUTEX_INITIALIZER, NULL };

void export_table_fork_lock(void)
{
	pthread_mutex_lock(&storage.lock);
}

void export_table_fork_unlock(void)
{
	pthread_mutex_unlock(&storage.lock);
}

/* A NULL ctx means the calling thread's current one; none gives INVALID_CONTEXT. */
static CUresult storage_resolve(CUcontext *ctx)
{
	CUresult rc;

	if (*ctx)
		return CUDA_SUCCESS;
	rc = cuCtxGetCurrent(ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	return *ctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

/* Caller holds storage.lock. Returns the link that points at the entry, or NULL. */
static struct storage_entry **storage_find(CUcontext ctx, const void *key)
{
	for (struct storage_entry **link = &storage.head; *link; link = &(*link)->next)
		if ((*link)->ctx == ctx && (*link)->key == key)
			return link;
	return NULL;
}

/* A key already present is refused with INVALID_HANDLE and keeps its value. */
static CUresult storage_put(CUcontext ctx, void *key, void *value, storage_dtor_fn dtor)
{
	struct storage_entry *entry;
	CUresult rc = storage_resolve(&ctx);

	pr_debug("c693336e[0](ctx=%p, key=%p, value=%p, dtor=%p) resolved %d",
		 (void *)ctx, key, value, (void *)(uintptr_t)dtor, rc);
	if (rc != CUDA_SUCCESS)
		return rc;
	entry = malloc(sizeof(*entry));
	if (!entry)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*entry = (struct storage_entry){ ctx, key, value, dtor, NULL };
	pthread_mutex_lock(&storage.lock);
	if (storage_find(ctx, key)) {
		pthread_mutex_unlock(&storage.lock);
		free(entry);
		return CUDA_ERROR_INVALID_HANDLE;
	}
	entry->next = storage.head;
	storage.head = entry;
	pthread_mutex_unlock(&storage.lock);
	return CUDA_SUCCESS;
}

/* Removes without calling the destructor, as the driver does. */
static CUresult storage_delete(CUcontext ctx, void *key)
{
	struct storage_entry **link, *entry = NULL;
	CUresult rc = storage_resolve(&ctx);

	pr_debug("c693336e[1](ctx=%p, key=%p)", (void *)ctx, key);
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&storage.lock);
	link = storage_find(ctx, key);
	if (link) {
		entry = *link;
		*link = entry->next;
	}
	pthread_mutex_unlock(&storage.lock);
	free(entry);
	return entry ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult storage_get(void **value, CUcontext ctx, void *key)
{
	struct storage_entry **link;
	CUresult rc;

	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	rc = storage_resolve(&ctx);
	if (rc != CUDA_SUCCESS)
		goto out;
	pthread_mutex_lock(&storage.lock);
	link = storage_find(ctx, key);
	if (link)
		*value = (*link)->value;
	pthread_mutex_unlock(&storage.lock);
	rc = link ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
out:
	pr_debug("c693336e[2](ctx=%p, key=%p) -> %d", (void *)ctx, key, rc);
	return rc;
}

void export_table_context_destroyed(CUcontext ctx)
{
	struct storage_entry *mine = NULL, **tail = &mine, **link, *entry;

	if (!ctx)
		return;
	/* Unlink first: a destructor may call back into the storage. */
	pthread_mutex_lock(&storage.lock);
	link = &storage.head;
	while ((entry = *link)) {
		if (entry->ctx != ctx) {
			link = &entry->next;
			continue;
		}
		*link = entry->next;
		entry->next = NULL;
		*tail = entry;
		tail = &entry->next;
	}
	pthread_mutex_unlock(&storage.lock);
	while ((entry = mine)) {
		mine = entry->next;
		pr_debug("context %p destroyed: destructor for key %p", (void *)ctx, entry->key);
		if (entry->dtor)
			entry->dtor(ctx, entry->key, entry->value);
		free(entry);
	}
}

/* ---- d4082055: integrity check ---- */

/* MD2's substitution table (RFC 1319), built from the digits of pi. */
static const uint8_t md2_subst[256] = {
	0x29, 0x2e, 0x43, 0xc9, 0xa2, 0xd8, 0x7c, 0x01, 0x3d, 0x36, 0x54, 0xa1, 0xec, 0xf0, 0x06, 0x13,
	0x62, 0xa7, 0x05, 0xf3, 0xc0, 0xc7, 0x73, 0x8c, 0x98, 0x93, 0x2b, 0xd9, 0xbc, 0x4c, 0x82, 0xca,
	0x1e, 0x9b, 0x57, 0x3c, 0xfd, 0xd4, 0xe0, 0x16, 0x67, 0x42, 0x6f, 0x18, 0x8a, 0x17, 0xe5, 0x12,
	0xbe, 0x4e, 0xc4, 0xd6, 0xda, 0x9e, 0xde, 0x49, 0xa0, 0xfb, 0xf5, 0x8e, 0xbb, 0x2f, 0xee, 0x7a,
	0xa9, 0x68, 0x79, 0x91, 0x15, 0xb2, 0x07, 0x3f, 0x94, 0xc2, 0x10, 0x89, 0x0b, 0x22, 0x5f, 0x21,
	0x80, 0x7f, 0x5d, 0x9a, 0x5a, 0x90, 0x32, 0x27, 0x35, 0x3e, 0xcc, 0xe7, 0xbf, 0xf7, 0x97, 0x03,
	0xff, 0x19, 0x30, 0xb3, 0x48, 0xa5, 0xb5, 0xd1, 0xd7, 0x5e, 0x92, 0x2a, 0xac, 0x56, 0xaa, 0xc6,
	0x4f, 0xb8, 0x38, 0xd2, 0x96, 0xa4, 0x7d, 0xb6, 0x76, 0xfc, 0x6b, 0xe2, 0x9c, 0x74, 0x04, 0xf1,
	0x45, 0x9d, 0x70, 0x59, 0x64, 0x71, 0x87, 0x20, 0x86, 0x5b, 0xcf, 0x65, 0xe6, 0x2d, 0xa8, 0x02,
	0x1b, 0x60, 0x25, 0xad, 0xae, 0xb0, 0xb9, 0xf6, 0x1c, 0x46, 0x61, 0x69, 0x34, 0x40, 0x7e, 0x0f,
	0x55, 0x47, 0xa3, 0x23, 0xdd, 0x51, 0xaf, 0x3a, 0xc3, 0x5c, 0xf9, 0xce, 0xba, 0xc5, 0xea, 0x26,
	0x2c, 0x53, 0x0d, 0x6e, 0x85, 0x28, 0x84, 0x09, 0xd3, 0xdf, 0xcd, 0xf4, 0x41, 0x81, 0x4d, 0x52,
	0x6a, 0xdc, 0x37, 0xc8, 0x6c, 0xc1, 0xab, 0xfa, 0x24, 0xe1, 0x7b, 0x08, 0x0c, 0xbd, 0xb1, 0x4a,
	0x78, 0x88, 0x95, 0x8b, 0xe3, 0x63, 0xe8, 0x6d, 0xe9, 0xcb, 0xd5, 0xfe, 0x3b, 0x00, 0x1d, 0x39,
	0xf2, 0xef, 0xb7, 0x0e, 0x66, 0x58, 0xd0, 0xe4, 0xa6, 0x77, 0x72, 0xf8, 0xeb, 0x75, 0x4b, 0x0a,
	0x31, 0x44, 0x50, 0xb4, 0x8f, 0xed, 0x1f, 0x1a, 0xdb, 0x99, 0x8d, 0x33, 0x9f, 0x11, 0x83, 0x14,
};

/* The HMAC key the driver uses (its own code derives it from a scrambled table). */
static const uint8_t integrity_key[16] = {
	0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52, 0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f,
};

struct md2 {
	uint8_t x[48];           /* state, current block, state ^ block */
	uint8_t checksum[16];
	uint8_t used;            /* bytes of the current block filled */
	uint8_t last;            /* last checksum byte written */
};

static void md2_update_byte(struct md2 *md, uint8_t c)
{
	unsigned i = md->used;
	uint8_t t = 0;

	md->x[16 + i] = c;
	md->x[32 + i] = md->x[i] ^ c;
	md->checksum[i] ^= md2_subst[c ^ md->last];
	md->last = md->checksum[i];
	md->used = (uint8_t)((i + 1) & 15);
	if (md->used)
		return;
	for (unsigned round = 0; round < 18; round++) {
		for (unsigned k = 0; k < 48; k++)
			t = md->x[k] ^= md2_subst[t];
		t = (uint8_t)(t + round);
	}
}

static void md2_update(struct md2 *md, const void *data, size_t len, uint8_t mask)
{
	const uint8_t *p = data;

	for (size_t i = 0; i < len; i++)
		md2_update_byte(md, p[i] ^ mask);
}

static void md2_final(struct md2 *md, uint8_t out[16])
{
	uint8_t pad = (uint8_t)(16 - md->used), checksum[16];

	for (unsigned i = 0; i < pad; i++)
		md2_update_byte(md, pad);
	memcpy(checksum, md->checksum, sizeof(checksum));
	md2_update(md, checksum, sizeof(checksum), 0);
	memcpy(out, md->x, 16);
}

void export_table_integrity_digest(const struct export_integrity_input *in,
				   const struct export_integrity_device *devices,
				   unsigned ndevices, uint8_t out[16])
{
	struct md2 md;
	uint8_t inner[16];

	memset(&md, 0, sizeof(md));
	md2_update(&md, integrity_key, sizeof(integrity_key), 0x36);
	md2_update(&md, in, sizeof(*in), 0);
	for (unsigned i = 0; i < ndevices; i++)
		md2_update(&md, &devices[i], sizeof(devices[i]), 0);
	md2_final(&md, inner);
	memset(&md, 0, sizeof(md));
	md2_update(&md, integrity_key, sizeof(integrity_key), 0x5c);
	md2_update(&md, inner, sizeof(inner), 0);
	md2_final(&md, out);
}

static CUresult integrity_device_read(int ordinal, struct export_integrity_device *out)
{
	CUdevice dev;
	CUresult rc;

	memset(out, 0, sizeof(*out));
	rc = cuDeviceGet(&dev, ordinal);
	if (rc == CUDA_SUCCESS)
		rc = cuDeviceGetUuid_v2((CUuuid *)out->uuid, dev);
	if (rc == CUDA_SUCCESS)
		rc = cuDeviceGetAttribute(&out->pci_domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, dev);
	if (rc == CUDA_SUCCESS)
		rc = cuDeviceGetAttribute(&out->pci_bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev);
	if (rc == CUDA_SUCCESS)
		rc = cuDeviceGetAttribute(&out->pci_device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, dev);
	return rc;
}

static const void *export_words[EXPORT_COUNT][EXPORT_MAX_WORDS];

/* More devices than this would be a guest lie; the digest covers the first ones. */
#define INTEGRITY_MAX_DEVICES 64

static CUresult integrity_check(unsigned version, uint64_t unix_seconds, uint8_t result[16])
{
	/* Driver 580's fixed answers for versions ending in 0 and 1. */
	static const uint8_t known0[16] = {
		0x5c, 0x67, 0xcb, 0x03, 0x1c, 0x18, 0x41, 0x33,
		0xe8, 0xd1, 0x4c, 0x1f, 0xaa, 0x83, 0xd3, 0x8e,
	};
	struct export_integrity_device devices[INTEGRITY_MAX_DEVICES];
	struct export_integrity_input in;
	int driver_version = 0, count = 0;
	CUresult rc;

	if (!result)
		return CUDA_ERROR_INVALID_VALUE;
	if (version % 10 < 2) {
		memcpy(result, known0, sizeof(known0));
		if (version % 10 == 1)
			result[7] = 0x18;
		rc = CUDA_SUCCESS;
		goto out;
	}
	rc = cuDriverGetVersion(&driver_version);
	if (rc == CUDA_SUCCESS)
		rc = cuDeviceGetCount(&count);
	if (rc != CUDA_SUCCESS)
		goto out;
	if (count < 0)
		count = 0;
	if (count > INTEGRITY_MAX_DEVICES)
		count = INTEGRITY_MAX_DEVICES;
	for (int i = 0; i < count && rc == CUDA_SUCCESS; i++)
		rc = integrity_device_read(i, &devices[i]);
	if (rc != CUDA_SUCCESS)
		goto out;
	in = (struct export_integrity_input){
		.driver_version = (uint32_t)driver_version,
		.version = version,
		.process_id = (uint32_t)getpid(),
		.thread_id = (uint32_t)(uintptr_t)pthread_self(),
		.cudart_table = (uint64_t)(uintptr_t)export_words[EXPORT_CUDART],
		.integrity_table = (uint64_t)(uintptr_t)export_words[EXPORT_INTEGRITY],
		.check_fn = (uint64_t)(uintptr_t)integrity_check,
		.unix_seconds = unix_seconds,
	};
	export_table_integrity_digest(&in, devices, (unsigned)count, result);
out:
	pr_debug("d4082055[1](version=%u, seconds=%llu) -> %d", version,
		 (unsigned long long)unix_seconds, rc);
	return rc;
}

/* ---- 6e163fbe: tools module ---- */

typedef void (*module_function_cb)(void *user, CUfunction fn, CUmodule mod);

/* cuFFT calls slot 7 as (ctx, module, callback, user) after loading a module
 * with cuModuleLoadData, with a callback that stores its second argument at
 * *user. The slot walks the module's functions, calling callback(user,
 * function, ...) for each, and answers how many it walked (measured on the
 * H200 with a module of 3 functions: 3; cuFFT's modules hold one and it
 * checks for 1). What the driver passes third is not the module and is
 * unknown (cuFFT ignores it): ours is the module. */
static int tools_module_functions(CUcontext ctx, CUmodule mod, module_function_cb cb, void *user)
{
	CUfunction *fns;
	unsigned count = 0;
	CUresult rc;

	(void)ctx;
	if (!cb)
		return 0;
	rc = cuModuleGetFunctionCount(&count, mod);
	fns = rc == CUDA_SUCCESS ? calloc(count ? count : 1, sizeof(*fns)) : NULL;
	if (fns)
		rc = cuModuleEnumerateFunctions(fns, count, mod);
	pr_debug("6e163fbe[7](module=%p): %u functions, %d", (void *)mod, count, rc);
	if (!fns || rc != CUDA_SUCCESS) {
		free(fns);
		return 0;
	}
	for (unsigned i = 0; i < count; i++)
		cb(user, fns[i], mod);
	free(fns);
	return (int)count;
}

/* ---- stubs ---- */

/* One function per stub so that a call says which slot it was; stub_owner maps
 * a stub's number to its table and slot when the tables are built. */
#define STUB_COUNT 200

static struct {
	uint8_t table;
	uint8_t slot;
} stub_owner[STUB_COUNT];
static atomic_bool stub_warned[STUB_COUNT];
static const struct export_desc export_descs[EXPORT_COUNT];

static CUresult stub_report(unsigned n)
{
	if (!atomic_exchange(&stub_warned[n], true))
		pr_warn("table %s... slot %u called: not implemented",
			export_descs[stub_owner[n].table].name, stub_owner[n].slot);
	return CUDA_ERROR_NOT_SUPPORTED;
}

#define STUB(n) static CUresult stub_##n(void) { return stub_report(n); }
#define STUB10(d) STUB(d##0) STUB(d##1) STUB(d##2) STUB(d##3) STUB(d##4) \
		  STUB(d##5) STUB(d##6) STUB(d##7) STUB(d##8) STUB(d##9)
#define STUB100(h) STUB10(h##0) STUB10(h##1) STUB10(h##2) STUB10(h##3) STUB10(h##4) \
		   STUB10(h##5) STUB10(h##6) STUB10(h##7) STUB10(h##8) STUB10(h##9)
STUB10() STUB10(1) STUB10(2) STUB10(3) STUB10(4) STUB10(5) STUB10(6) STUB10(7) STUB10(8) STUB10(9)
STUB100(1)

#define REF(n) (const void *)stub_##n,
#define REF10(d) REF(d##0) REF(d##1) REF(d##2) REF(d##3) REF(d##4) \
		 REF(d##5) REF(d##6) REF(d##7) REF(d##8) REF(d##9)
#define REF100(h) REF10(h##0) REF10(h##1) REF10(h##2) REF10(h##3) REF10(h##4) \
		  REF10(h##5) REF10(h##6) REF10(h##7) REF10(h##8) REF10(h##9)
static const void *const stub_fns[STUB_COUNT] = {
	REF10() REF10(1) REF10(2) REF10(3) REF10(4) REF10(5) REF10(6) REF10(7) REF10(8) REF10(9)
	REF100(1)
};

/* ---- the tables ---- */

#define FN(f) ((const void *)(uintptr_t)(f))

static const struct export_slot tools_context_slots[] = {
	{ 4, FN(tools_context_id) }, { 39, FN(tools_context_stream_id) },
	{ 51, FN(tools_context_stream) }, { 91, NULL },
};
static const struct export_slot checks_slots[] = {
	{ 2, FN(checks_context) }, { 3, FN(checks_global) },
};
static const struct export_slot tls_slots[] = { { 2, FN(tls_current_context) } };
static const struct export_slot cudart_slots[] = {
	{ 2, FN(cudart_primary_context) }, { 10, NULL },
};
static const struct export_slot hooks_slots[] = {
	{ 2, FN(hooks_get_buffer1) }, { 6, FN(hooks_get_buffer2) },
};
static const struct export_slot storage_slots[] = {
	{ 0, FN(storage_put) }, { 1, FN(storage_delete) }, { 2, FN(storage_get) }, { 3, NULL },
};
static const struct export_slot integrity_slots[] = { { 1, FN(integrity_check) } };
static const struct export_slot tools_module_slots[] = { { 7, FN(tools_module_functions) } };

#define SLOTS(a) a, sizeof(a) / sizeof((a)[0])

/* Lengths, size words and holes as driver 580.159.04 (CUDA 13.0) hands them out. */
static const struct export_desc export_descs[EXPORT_COUNT] = {
	[EXPORT_TOOLS_CONTEXT] = { "21318c60",
		{ 0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2 },
		93, true, SLOTS(tools_context_slots) },
	[EXPORT_CONTEXT_CHECKS] = { "263e8860",
		{ 0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e },
		15, true, SLOTS(checks_slots) },
	[EXPORT_TOOLS_TLS] = { "42d85a81",
		{ 0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc },
		3, true, SLOTS(tls_slots) },
	[EXPORT_TORCH_ONLY] = { "69a28e9f",
		{ 0x69, 0xa2, 0x8e, 0x9f, 0x24, 0x49, 0x8b, 0x47, 0xb0, 0x30, 0xc5, 0xda, 0x33, 0x0e, 0xa4, 0xe9 },
		34, true, NULL, 0 },
	[EXPORT_CUDART] = { "6bd5fb6c",
		{ 0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9 },
		13, true, SLOTS(cudart_slots) },
	[EXPORT_CALLBACK_HOOKS] = { "a094798c",
		{ 0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66 },
		7, true, SLOTS(hooks_slots) },
	[EXPORT_CONTEXT_STORAGE] = { "c693336e",
		{ 0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93 },
		4, false, SLOTS(storage_slots) },
	[EXPORT_INTEGRITY] = { "d4082055",
		{ 0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2 },
		3, true, SLOTS(integrity_slots) },
	[EXPORT_F8CFF951] = { "f8cff951",
		{ 0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e, 0xb9, 0xe2, 0xfb, 0x46, 0x9e, 0x7c, 0x0d, 0xd9 },
		3, true, NULL, 0 },
	/* The next two are not measured on the driver: their lengths are the
	 * least the callers need (cuFFT checks that 6e163fbe's size word is over
	 * 0x37 before it calls slot 7; cuBLASLt calls 1734dc26's slot 4 without a
	 * check, and when that answers non-zero takes a path of its own). */
	[EXPORT_TOOLS_MODULE] = { "6e163fbe",
		{ 0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d, 0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e },
		8, true, SLOTS(tools_module_slots) },
	[EXPORT_1734DC26] = { "1734dc26",
		{ 0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45, 0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca },
		5, true, NULL, 0 },
};

static pthread_once_t export_once = PTHREAD_ONCE_INIT;

static void export_tables_build(void)
{
	unsigned next_stub = 0;

	for (unsigned t = 0; t < EXPORT_COUNT; t++) {
		const struct export_desc *d = &export_descs[t];
		const void **words = export_words[t];
		unsigned first = 0;

		if (d->size_word) {
			words[0] = (const void *)(uintptr_t)(d->words * sizeof(void *));
			first = 1;
		}
		for (unsigned w = first; w < d->words; w++) {
			const struct export_slot *s = NULL;

			for (unsigned i = 0; i < d->nslots; i++)
				if (d->slots[i].index == w)
					s = &d->slots[i];
			if (s) {
				words[w] = s->fn;
				continue;
			}
			/* STUB_COUNT covers every table; a new table that overflows it fails here. */
			if (next_stub >= STUB_COUNT) {
				pr_err("out of stubs at table %s slot %u", d->name, w);
				words[w] = NULL;
				continue;
			}
			stub_owner[next_stub].table = (uint8_t)t;
			stub_owner[next_stub].slot = (uint8_t)w;
			words[w] = stub_fns[next_stub++];
		}
	}
}

CUresult export_table_get(const void **table, const CUuuid *id)
{
	if (!table || !id)
		return CUDA_ERROR_INVALID_VALUE;
	if (guest_table_get(table, id))
		return CUDA_SUCCESS;
	pthread_once(&export_once, export_tables_build);
	for (unsigned t = 0; t < EXPORT_COUNT; t++) {
		if (memcmp(export_descs[t].uuid, id->bytes, 16))
			continue;
		*table = export_words[t];
		pr_debug("table %s... -> %p", export_descs[t].name, (const void *)export_words[t]);
		return CUDA_SUCCESS;
	}
	*table = NULL;
	pr_info("unknown export table %02x%02x%02x%02x%02x%02x%02x%02x%02x%02x%02x%02x%02x%02x%02x%02x",
		(uint8_t)id->bytes[0], (uint8_t)id->bytes[1], (uint8_t)id->bytes[2], (uint8_t)id->bytes[3],
		(uint8_t)id->bytes[4], (uint8_t)id->bytes[5], (uint8_t)id->bytes[6], (uint8_t)id->bytes[7],
		(uint8_t)id->bytes[8], (uint8_t)id->bytes[9], (uint8_t)id->bytes[10], (uint8_t)id->bytes[11],
		(uint8_t)id->bytes[12], (uint8_t)id->bytes[13], (uint8_t)id->bytes[14], (uint8_t)id->bytes[15]);
	return CUDA_ERROR_INVALID_VALUE;
}
