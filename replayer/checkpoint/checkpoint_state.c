/* What a snapshot carries besides objects and device memory: the settings
 * made after an object's creation (context limits and cache configuration,
 * function and kernel attributes, stream attributes; docs/journal.md,
 * "Settings") and the contents of module globals.
 *
 * Module globals (__device__, __constant__) live where the driver puts
 * them, outside the arena. A snapshot lists each module's and library's
 * globals from its image (common/fatbin.h), asks the backend for each one's
 * address and reads its bytes into a journal record; a restore writes them
 * back once the modules are loaded again. The driver may place a global
 * elsewhere in the new worker: kernels naming it as a symbol are relocated
 * by the driver and see the restored bytes, but an address the application
 * was given before (cuModuleGetGlobal, cudaGetSymbolAddress, cudart's
 * cached symbol addresses) is then stale. The restore logs each global
 * that moved, accepts the new address for copies and nothing at the old one
 * (docs/limits.md). A library's globals are read and written in each
 * device's context: every context the library is loaded in has its own.
 *
 * __managed__ variables are globals too (the driver's managed memory, where
 * the module put it) and are captured the same way: the device copy, read
 * after the quiescing synchronisation. The host's writes not yet pushed are
 * the guest's (its mirror's DIRTY pages, guest-shim/managed.c), which it
 * pushes to the restored worker as it does for managed allocations. The
 * guest's mirror lies at the address the variable had: one that moved
 * cannot be followed (the application's host code holds the old address
 * and may hand it to kernels), so a restore that finds a variable the guest
 * mirrors at another address fails. */
#define LOG_PREFIX "checkpoint: "
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "fatbin.h"
#include "log.h"
#include "tracker.h"

#define GLOBALS_MAGIC 0x31474d54u       /* "TMG1" */
#define GLOBAL_HEADER 32u               /* u64 owner, address, size, u32 flags, u32 name length */
#define GLOBAL_GUEST_KNOWN 1u           /* the guest was given its address */
#define GLOBAL_MANAGED 2u               /* __managed__: the guest mirrors it there */
/* Flags bits 8-15: the device whose context the global was read in. A
 * library has a copy of each global in every context it is used in
 * (cuLibraryGetGlobal answers the current context's); a module has one. */
#define GLOBAL_DEVICE_SHIFT 8u
#define GLOBAL_DEVICE_MASK 0xff00u

/* ---- settings ---- */

static CUresult ctx_setting_apply(struct exec *ex, uint32_t id, uint64_t value)
{
	if (id < EXEC_CTX_SETTING_CACHE_CONFIG)
		return exec_ctx_limit_set(ex, id, value);
	switch (id) {
	case EXEC_CTX_SETTING_CACHE_CONFIG:
		return ex->be->cuCtxSetCacheConfig((CUfunc_cache)value);
	case EXEC_CTX_SETTING_SHARED_CONFIG:
		return ex->be->cuCtxSetSharedMemConfig((CUsharedconfig)value);
	case EXEC_CTX_SETTING_FLAGS:
		return ex->be->cuDevicePrimaryCtxSetFlags(ex->dev.device, (unsigned)value);
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

int checkpoint_state_restore_ctx(struct exec *ex, struct tracker *saved, char *err, size_t errlen)
{
	const uint8_t *b;
	const void *bytes;
	size_t len;

	if (tracker_meta_bytes_get(saved, EXEC_META_CTX_SETTINGS, &bytes, &len))
		return 0;
	b = bytes;
	if (len % EXEC_CTX_SETTING_RECORD) {
		snprintf(err, errlen, "the context settings record is damaged");
		return -EBADMSG;
	}
	for (size_t i = 0; i < len; i += EXEC_CTX_SETTING_RECORD) {
		uint32_t id = le32_get(b + i);
		CUresult res = ctx_setting_apply(ex, id, le64_get(b + i + 8));

		if (res != CUDA_SUCCESS) {
			snprintf(err, errlen, "setting 0x%x of the context failed again with CUDA error %d",
				 id, res);
			return -EIO;
		}
	}
	/* The live journal of the restored session holds them too. */
	if (ex->journal && tracker_meta_bytes_set(ex->journal, EXEC_META_CTX_SETTINGS, bytes, len))
		ex->journal_broken = true;
	return 0;
}

CUresult checkpoint_state_func(struct exec *ex, const struct tracker_object *o, void *real)
{
	const uint8_t *a = o->args;
	uint32_t at;

	if (o->args_len < 4)
		return CUDA_SUCCESS;
	at = 4 + le32_get(a);
	if (at > o->args_len || (o->args_len - at) % EXEC_FUNC_SETTING_RECORD)
		return CUDA_ERROR_INVALID_VALUE;
	for (; at < o->args_len; at += EXEC_FUNC_SETTING_RECORD) {
		uint32_t id = le32_get(a + at);
		int32_t v = (int32_t)le32_get(a + at + 4);
		CUresult res;

		if (o->kind == HANDLE_KERNEL)
			res = id == EXEC_FUNC_SETTING_CACHE_CONFIG ?
			      ex->be->cuKernelSetCacheConfig(real, (CUfunc_cache)v, ex->dev.device) :
			      id == EXEC_FUNC_SETTING_SHARED_CONFIG ? CUDA_ERROR_INVALID_VALUE :
			      ex->be->cuKernelSetAttribute((CUfunction_attribute)id, v, real, ex->dev.device);
		else
			res = id == EXEC_FUNC_SETTING_CACHE_CONFIG ?
			      ex->be->cuFuncSetCacheConfig(real, (CUfunc_cache)v) :
			      id == EXEC_FUNC_SETTING_SHARED_CONFIG ?
			      ex->be->cuFuncSetSharedMemConfig(real, (CUsharedconfig)v) :
			      ex->be->cuFuncSetAttribute(real, (CUfunction_attribute)id, v);
		if (res != CUDA_SUCCESS)
			return res;
	}
	return CUDA_SUCCESS;
}

static CUresult stream_settings_apply(struct exec *ex, CUstream s, const uint8_t *r, size_t len)
{
	for (size_t i = 0; i + EXEC_STREAM_SETTING_RECORD <= len; i += EXEC_STREAM_SETTING_RECORD) {
		CUstreamAttrValue v;
		CUresult res;

		memcpy(&v, r + i + 8, sizeof(v));
		res = ex->be->cuStreamSetAttribute(s, (CUstreamAttrID)le32_get(r + i), &v);
		if (res != CUDA_SUCCESS)
			return res;
	}
	return CUDA_SUCCESS;
}

CUresult checkpoint_state_stream(struct exec *ex, const struct tracker_object *o, CUstream s)
{
	if (o->args_len < 8 || (o->args_len - 8) % EXEC_STREAM_SETTING_RECORD)
		return CUDA_ERROR_INVALID_VALUE;
	return stream_settings_apply(ex, s, (const uint8_t *)o->args + 8, o->args_len - 8);
}

static int builtin_streams_restore(struct exec *ex, struct tracker *saved, char *err, size_t errlen)
{
	const uint8_t *b;
	const void *bytes;
	size_t len;

	if (tracker_meta_bytes_get(saved, EXEC_META_STREAM_SETTINGS, &bytes, &len))
		return 0;
	b = bytes;
	if (len % EXEC_STREAM_SETTING_RECORD) {
		snprintf(err, errlen, "the stream settings record is damaged");
		return -EBADMSG;
	}
	for (size_t i = 0; i < len; i += EXEC_STREAM_SETTING_RECORD) {
		CUstream s;
		CUresult res = exec_stream_real(ex, le32_get(b + i + 4), &s);

		if (res == CUDA_SUCCESS)
			res = stream_settings_apply(ex, s, b + i, EXEC_STREAM_SETTING_RECORD);
		if (res != CUDA_SUCCESS) {
			snprintf(err, errlen, "attribute %u of stream %u failed again with CUDA error %d",
				 le32_get(b + i), le32_get(b + i + 4), res);
			return -EIO;
		}
	}
	if (ex->journal && tracker_meta_bytes_set(ex->journal, EXEC_META_STREAM_SETTINGS, bytes, len))
		ex->journal_broken = true;
	return 0;
}

/* ---- module globals ---- */

/* A library hands out its __managed__ variables with cuLibraryGetManaged
 * (as cudart asks for them); a module's come from cuModuleGetGlobal. */
static CUresult global_lookup(struct exec *ex, const struct handle_entry *owner, const char *name,
			      bool managed, CUdeviceptr *addr, size_t *size)
{
	if (owner->kind != HANDLE_LIBRARY)
		return ex->be->cuModuleGetGlobal(addr, size, owner->real, name);
	return managed ? ex->be->cuLibraryGetManaged(addr, size, owner->real, name)
		       : ex->be->cuLibraryGetGlobal(addr, size, owner->real, name);
}

struct globals_out {
	struct checkpoint *ck;
	struct exec *ex;
	uint8_t *buf;
	size_t len, cap;
	uint32_t count;
	unsigned sm;
	int ret;
	char *err;
	size_t errlen;
};

static int out_reserve(struct globals_out *g, size_t more)
{
	if (g->len + more > TRACKER_META_VALUE_MAX) {
		snprintf(g->err, g->errlen, "module globals take more than %u bytes; the session cannot "
			 "be snapshotted (docs/limits.md)", TRACKER_META_VALUE_MAX);
		return -EFBIG;
	}
	if (g->len + more > g->cap) {
		size_t cap = g->cap ? g->cap : 4096;
		uint8_t *n;

		while (cap < g->len + more)
			cap *= 2;
		n = realloc(g->buf, cap);
		if (!n)
			return -ENOMEM;
		g->buf = n;
		g->cap = cap;
	}
	return 0;
}

static bool guest_knows(const struct exec *ex, uint64_t addr)
{
	for (unsigned i = 0; i < ex->globals.count; i++)
		if (ex->globals.ranges[i].addr == addr)
			return true;
	return false;
}

/* The names of the globals an image lists, parsed once per image: a large
 * fatbin takes long to read, and a snapshot's pause must not. */
struct checkpoint_image_globals {
	struct checkpoint_image_globals *next;
	uint8_t hash[TRACKER_HASH_SIZE];
	unsigned count;
	char **names;
	bool *managed;              /* names[i] is a __managed__ variable */
};

void checkpoint_image_globals_free(struct checkpoint *ck)
{
	while (ck->image_globals) {
		struct checkpoint_image_globals *c = ck->image_globals;

		ck->image_globals = c->next;
		for (unsigned i = 0; i < c->count; i++)
			free(c->names[i]);
		free(c->names);
		free(c->managed);
		free(c);
	}
}

/* The globals of an image, or NULL when it cannot be read (logged once). */
static const struct checkpoint_image_globals *image_globals(struct checkpoint *ck, const uint8_t *hash,
						      const void *image, size_t size, unsigned sm)
{
	struct checkpoint_image_globals *c;
	struct cuimage *img = NULL;
	int ret;

	for (c = ck->image_globals; c; c = c->next)
		if (!memcmp(c->hash, hash, TRACKER_HASH_SIZE))
			return c->names || !c->count ? c : NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	memcpy(c->hash, hash, TRACKER_HASH_SIZE);
	c->next = ck->image_globals;
	ck->image_globals = c;
	ret = cuimage_parse(image, size, sm, &img);
	if (!ret) {
		c->names = calloc(cuimage_global_count(img) + 1, sizeof(*c->names));
		c->managed = calloc(cuimage_global_count(img) + 1, sizeof(*c->managed));
		ret = c->names && c->managed ? 0 : -ENOMEM;
	}
	for (unsigned i = 0; !ret && i < cuimage_global_count(img); i++) {
		const struct cuimage_global *cg = cuimage_global(img, i);

		if (strlen(cg->name) > WIRE_STR_MAX)
			continue;
		c->names[c->count] = strdup(cg->name);
		c->managed[c->count] = cg->managed;
		if (!c->names[c->count])
			ret = -ENOMEM;
		else
			c->count++;
	}
	cuimage_free(img);
	if (ret) {
		/* Not fatal: the driver took an image tern cannot read (its
		 * globals, if any, come back as the image initialises them). */
		pr_warn("an image cannot be read for its globals (%s): they are not captured", strerror(-ret));
		for (unsigned i = 0; i < c->count; i++)
			free(c->names[i]);
		free(c->names);
		free(c->managed);
		c->names = NULL;
		c->managed = NULL;
		c->count = 1;           /* marks "unreadable" */
		return NULL;
	}
	return c;
}

/* Global @name of @e as device @d's context sees it, unless an earlier
 * device's context sees the same one (a module's). */
static void global_save(struct globals_out *g, struct handle_entry *e, const char *name, bool managed,
			unsigned d)
{
	struct exec *ex = g->ex;
	size_t name_len = strlen(name), size = 0, other_size;
	CUdeviceptr addr = 0, other, guest;
	uint32_t flags, n32 = (uint32_t)name_len;
	uint64_t s64;
	uint8_t *h;
	CUresult res;

	if (exec_context_switch(ex, ex->dev.list[d].ctx) != CUDA_SUCCESS ||
	    global_lookup(ex, e, name, managed, &addr, &size) != CUDA_SUCCESS)
		return;         /* listed in the image, dropped by the linker */
	for (unsigned k = 0; k < d; k++)
		if (exec_context_switch(ex, ex->dev.list[k].ctx) == CUDA_SUCCESS &&
		    global_lookup(ex, e, name, managed, &other, &other_size) == CUDA_SUCCESS && other == addr)
			return;
	if (exec_context_switch(ex, ex->dev.list[d].ctx) != CUDA_SUCCESS)
		return;
	g->ret = out_reserve(g, GLOBAL_HEADER + name_len + size);
	if (g->ret)
		return;
	h = g->buf + g->len;
	guest = exec_guest_addr(ex, addr);
	flags = (guest_knows(ex, guest) ? GLOBAL_GUEST_KNOWN : 0) | (managed ? GLOBAL_MANAGED : 0) |
		d << GLOBAL_DEVICE_SHIFT;
	s64 = size;
	memcpy(h, &e->handle, 8);
	memcpy(h + 8, &guest, 8);
	memcpy(h + 16, &s64, 8);
	memcpy(h + 24, &flags, 4);
	memcpy(h + 28, &n32, 4);
	memcpy(h + GLOBAL_HEADER, name, name_len);
	res = size ? ex->be->cuMemcpyDtoH(h + GLOBAL_HEADER + name_len, addr, size) : CUDA_SUCCESS;
	if (res != CUDA_SUCCESS) {
		snprintf(g->err, g->errlen, "reading global %s failed with CUDA error %d", name, res);
		g->ret = -EIO;
		return;
	}
	g->len += GLOBAL_HEADER + name_len + size;
	g->count++;
}

/* One module's or library's globals, from its image in the journal. */
static int entry_globals(struct handle_entry *e, void *arg)
{
	struct globals_out *g = arg;
	struct exec *ex = g->ex;
	struct tracker_object o;
	struct tracker_image im;
	const struct checkpoint_image_globals *c;
	const void *image;
	uint8_t hash[TRACKER_HASH_SIZE];

	if ((e->kind != HANDLE_MODULE && e->kind != HANDLE_LIBRARY) || e->parent)
		return 0;       /* a library's module: its library lists them */
	if (tracker_object_get(ex->journal, e->handle, &o) || o.args_len != TRACKER_HASH_SIZE)
		return 0;
	memcpy(hash, o.args, sizeof(hash));
	if (tracker_image_get(ex->journal, hash, &im, &image))
		return 0;
	c = image_globals(g->ck, hash, image, im.size, g->sm);
	for (unsigned i = 0; c && i < c->count && !g->ret; i++)
		for (unsigned d = 0; d < ex->dev.count && !g->ret; d++)
			global_save(g, e, c->names[i], c->managed[i], d);
	return g->ret;
}

int checkpoint_state_save(struct checkpoint *ck, char *err, size_t errlen)
{
	struct exec *ex = ck->ex;
	struct globals_out g = { .ck = ck, .ex = ex, .err = err, .errlen = errlen };
	int major = 9, minor = 0, ret;

	if (!ex->journal)
		return 0;
	ex->be->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, ex->dev.device);
	ex->be->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, ex->dev.device);
	g.sm = (unsigned)(major * 10 + minor);
	ret = out_reserve(&g, 8);
	if (!ret) {
		g.len = 8;
		handle_table_foreach(ex->handles, entry_globals, &g);
		ret = g.ret;
	}
	if (!ret) {
		uint32_t magic = GLOBALS_MAGIC;

		memcpy(g.buf, &magic, 4);
		memcpy(g.buf + 4, &g.count, 4);
		ret = tracker_meta_bytes_set(ex->journal, EXEC_META_MODULE_GLOBALS, g.buf, g.len);
		if (ret)
			snprintf(err, errlen, "cannot journal module globals: %s", strerror(-ret));
	}
	free(g.buf);
	return ret;
}

/* What this process has mapped at @addr, for an error message: the line of
 * /proc/self/maps, or "nothing". */
static void mapping_at(uint64_t addr, char *out, size_t n)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];

	snprintf(out, n, "nothing");
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long long lo, hi;

		if (sscanf(line, "%llx-%llx", &lo, &hi) == 2 && addr >= lo && addr < hi) {
			line[strcspn(line, "\n")] = 0;
			snprintf(out, n, "%.150s", line);
			break;
		}
	}
	if (f)
		fclose(f);
}

/* Keep what this process maps out of the pages of [@addr, +@size), where
 * the guest mirrors a __managed__ variable that now lies elsewhere: a
 * kernel given the old address must fault, not reach something of the
 * worker's. Pages this worker reserved for another variable already are
 * fine. 0, or -1 when something else is mapped there. */
static int old_reserve(uint64_t addr, uint64_t size)
{
	static struct {
		uint64_t lo, hi;
	} held[64];
	static unsigned nheld;
	uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE), lo = addr & ~(pg - 1);

	for (uint64_t p = lo; p < addr + size; p += pg) {
		void *m = mmap((void *)(uintptr_t)p, pg, PROT_NONE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
		bool ours = false;

		if (m == (void *)(uintptr_t)p)
			continue;
		if (m != MAP_FAILED)
			munmap(m, pg);  /* a kernel that took the address as a hint */
		for (unsigned i = 0; i < nheld; i++)
			ours |= p >= held[i].lo && p < held[i].hi;
		if (!ours)
			return -1;
	}
	if (nheld < sizeof(held) / sizeof(held[0])) {
		held[nheld].lo = lo;
		held[nheld].hi = addr + size;
		nheld++;
	}
	return 0;
}

/* The module globals record written back (@place_only false), or, before
 * the restore allocates anything of its own, only each __managed__
 * variable looked up: under lazy module loading the driver places one at
 * its first lookup, and a pinned staging buffer allocated first took its
 * old address on the H200 (the restore then refused: "moved ... lies
 * there"). */
static int globals_walk(struct exec *ex, struct tracker *saved, bool place_only, char *err, size_t errlen)
{
	const uint8_t *b;
	const void *bytes;
	size_t len, at = 8;
	uint32_t count;

	if (tracker_meta_bytes_get(saved, EXEC_META_MODULE_GLOBALS, &bytes, &len))
		return 0;       /* a snapshot of an older tern */
	b = bytes;
	if (len < 8 || le32_get(b) != GLOBALS_MAGIC) {
		snprintf(err, errlen, "the module globals record is damaged");
		return -EBADMSG;
	}
	count = le32_get(b + 4);
	for (uint32_t i = 0; i < count; i++) {
		uint64_t owner, old, size;
		uint32_t flags, name_len, device;
		char name[WIRE_STR_MAX + 1];
		struct handle_entry *e;
		CUdeviceptr addr = 0;
		size_t now_size = 0;
		CUresult res;

		if (len - at < GLOBAL_HEADER)
			goto damaged;
		owner = le64_get(b + at);
		old = le64_get(b + at + 8);
		size = le64_get(b + at + 16);
		flags = le32_get(b + at + 24);
		name_len = le32_get(b + at + 28);
		if (name_len > WIRE_STR_MAX || len - at - GLOBAL_HEADER < name_len ||
		    len - at - GLOBAL_HEADER - name_len < size)
			goto damaged;
		memcpy(name, b + at + GLOBAL_HEADER, name_len);
		name[name_len] = 0;
		e = handle_table_get(ex->handles, owner, handle_kind_of(owner));
		if (place_only && (!e || (e->kind != HANDLE_MODULE && e->kind != HANDLE_LIBRARY))) {
			at += GLOBAL_HEADER + name_len + size;
			continue;       /* restore_late says what is wrong with it */
		}
		if (!e || (e->kind != HANDLE_MODULE && e->kind != HANDLE_LIBRARY))
			goto damaged;
		device = (flags & GLOBAL_DEVICE_MASK) >> GLOBAL_DEVICE_SHIFT;
		if (place_only && device >= ex->dev.count) {
			at += GLOBAL_HEADER + name_len + size;
			continue;
		}
		if (device >= ex->dev.count) {
			snprintf(err, errlen, "global %s was read on device %u, which the session lacks", name,
				 device);
			return -ENODEV;
		}
		res = exec_context_switch(ex, ex->dev.list[device].ctx);
		if (place_only) {
			if (res == CUDA_SUCCESS && (flags & GLOBAL_MANAGED))
				global_lookup(ex, e, name, true, &addr, &now_size);
			at += GLOBAL_HEADER + name_len + size;
			continue;
		}
		if (res == CUDA_SUCCESS)
			res = global_lookup(ex, e, name, flags & GLOBAL_MANAGED, &addr, &now_size);
		if (res == CUDA_SUCCESS && now_size != size)
			res = CUDA_ERROR_INVALID_IMAGE;
		if (res == CUDA_SUCCESS && addr != old && (flags & GLOBAL_MANAGED) && (flags & GLOBAL_GUEST_KNOWN) &&
		    old_reserve(old, size)) {
			char at_old[160];

			mapping_at(old, at_old, sizeof(at_old));
			snprintf(err, errlen, "__managed__ variable %s moved from 0x%llx to 0x%llx in the "
				 "restored worker, which has %s at the old address: the guest's host mirror "
				 "of it lies there, so the session cannot continue (docs/limits.md)", name,
				 (unsigned long long)old, (unsigned long long)addr, at_old);
			return -EADDRNOTAVAIL;
		}
		if (res == CUDA_SUCCESS && size)
			res = ex->be->cuMemcpyHtoD(addr, b + at + GLOBAL_HEADER + name_len, size);
		if (res != CUDA_SUCCESS) {
			snprintf(err, errlen, "global %s of 0x%llx cannot be written back (CUDA error %d)",
				 name, (unsigned long long)owner, res);
			return -EIO;
		}
		if (flags & GLOBAL_GUEST_KNOWN) {
			exec_extra_range_add(ex, addr, size, owner);
			if (addr != old) {
				exec_extra_range_move(ex, old, size, owner, addr);
				pr_warn("global %s moved from 0x%llx to 0x%llx: kernels see it there, copies "
					"and memsets at the old address the application holds reach it, a "
					"kernel given the old address does not", name,
					(unsigned long long)old, (unsigned long long)addr);
			}
		}
		at += GLOBAL_HEADER + name_len + size;
	}
	if (at != len)
		goto damaged;
	return 0;
damaged:
	snprintf(err, errlen, "the module globals record is damaged");
	return -EBADMSG;
}

int checkpoint_state_restore_late(struct exec *ex, struct tracker *saved, char *err, size_t errlen)
{
	int ret = builtin_streams_restore(ex, saved, err, errlen);

	return ret ? ret : globals_walk(ex, saved, false, err, errlen);
}

int checkpoint_state_globals_place(struct exec *ex, struct tracker *saved, char *err, size_t errlen)
{
	return globals_walk(ex, saved, true, err, errlen);
}

bool checkpoint_state_has_managed_globals(struct tracker *saved)
{
	const uint8_t *b;
	const void *bytes;
	size_t len, at = 8;

	if (tracker_meta_bytes_get(saved, EXEC_META_MODULE_GLOBALS, &bytes, &len))
		return false;
	b = bytes;
	if (len < 8 || le32_get(b) != GLOBALS_MAGIC)
		return true;    /* damaged: the restore says so; take the careful order */
	for (uint32_t i = 0, count = le32_get(b + 4); i < count && len - at >= GLOBAL_HEADER; i++) {
		uint64_t size = le64_get(b + at + 16);
		uint32_t name_len = le32_get(b + at + 28);

		if (le32_get(b + at + 24) & GLOBAL_MANAGED)
			return true;
		if (len - at - GLOBAL_HEADER < name_len || len - at - GLOBAL_HEADER - name_len < size)
			return true;    /* damaged: the restore says so; take the careful order */
		at += GLOBAL_HEADER + name_len + size;
	}
	return false;
}
