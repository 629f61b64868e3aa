#define LOG_PREFIX "checkpoint: "
#include "checkpoint.h"
#include "checkpoint_internal.h"
#include "monotonic.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "arena.h"
#include "capture.h"
#include "log.h"
#include "snap_reader.h"
#include "snap_store.h"
#include "snap_writer.h"
#include "tracker.h"

/* Journal meta keys of the replayer (the tracker reserves those below 0x10000). */
#define META_NEXT_SERIAL(kind) (TRACKER_META_USER + (uint32_t)(kind))
#define META_QUOTA (TRACKER_META_USER + 0x100)
#define META_CAPTURE_MODE (TRACKER_META_USER + 0x101)

/* Objects come back parents first: contexts, libraries, their modules and
 * kernels, plain modules, functions, then streams and events, then graphs
 * (their kernel and event nodes name functions and events) and executable
 * graphs (which count the graph they came from), mipmapped arrays before
 * the arrays of their levels; texture and surface objects are gathered and
 * recreated last, in the order of their values (exec_texobj_restore_all).
 *
 * Contexts, libraries and modules come back first of all, before the
 * snapshot machinery allocates its staging and shadow buffers and the
 * memory is filled: the driver places a module's globals, __managed__
 * variables included, in memory it allocates as the module loads, and a
 * restored worker whose driver has made the same allocations before the
 * same loads as the original one (which loaded its modules before it took
 * any snapshot) has the best chance to place them at the same addresses
 * (a __managed__ variable that moves fails the restore: checkpoint.md). */
static const uint32_t restore_order_code[] = { HANDLE_CONTEXT, HANDLE_LIBRARY, HANDLE_MODULE };
static const uint32_t restore_order[] = {
	HANDLE_KERNEL, HANDLE_FUNCTION, HANDLE_STREAM, HANDLE_EVENT, HANDLE_MEMPOOL, HANDLE_GRAPH,
	HANDLE_GRAPH_EXEC, HANDLE_MIPMAP, HANDLE_ARRAY, HANDLE_TEXOBJ, HANDLE_SURFOBJ,
};

struct checkpoint_job {
	struct checkpoint *ck;
	struct snap_store *store;
	struct snap_writer *writer;
	struct capture_stats stats;
	pthread_t thread;
	/* What the drain thread needs of the session, copied while the guest
	 * is paused: the worker goes on dispatching as it drains, and the
	 * handle table is the worker thread's alone (handle_table.h). */
	void *ctx;                  /* the backend's primary context of device 0 */
	int done_fd;
	int status;
	char error[256];
	char name[SNAP_NAME_MAX + 1];
	char parent[SNAP_NAME_MAX + 1];
	char session[SNAP_NAME_MAX + 1];     /* session ids are up to 255 bytes */
	uint64_t seq;
	uint64_t start_ns, pause_ns, end_ns;
	uint64_t quiesced_ns, store_ns, journal_ns;  /* where the pause went */
	struct snap_writer_stats wstats;
	unsigned regions;
	uint64_t bytes;
};


void checkpoint_close(struct checkpoint *ck)
{
	capture_close(ck->capture);
	ck->capture = NULL;
	checkpoint_held_free(ck);
	checkpoint_image_globals_free(ck);
}

int checkpoint_capture_get(struct checkpoint *ck, struct capture **out)
{
	struct exec *ex = ck->ex;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	struct capture_config cfg = { .shadow_max = CAPTURE_SHADOW_AUTO,
				      .threads = cpus > 4 ? (unsigned)cpus : 4 };
	int ret;

	/* Its streams, staging buffers and hash kernel belong to device 0's
	 * context, which must be current when it opens and when it copies,
	 * whatever the last request or object restored used. */
	if (exec_context_switch(ex, ex->dev.primary_ctx) != CUDA_SUCCESS)
		return -EIO;
	if (!ck->capture) {
		ret = capture_open(ex->be, ex->dev.device, &cfg, &ck->capture);
		if (ret)
			return ret;
	}
	*out = ck->capture;
	return 0;
}

/* What a restore needs besides objects and regions. */
static int journal_bookkeeping(struct exec *ex, uint64_t seq, const void *reply, size_t len)
{
	int ret = 0;

	for (uint32_t k = HANDLE_CONTEXT; k < HANDLE_KIND_MAX && !ret; k++)
		ret = tracker_meta_u64_set(ex->journal, META_NEXT_SERIAL(k),
					   handle_table_next_serial(ex->handles, (enum handle_kind)k));
	if (!ret)
		ret = tracker_meta_u64_set(ex->journal, META_QUOTA, ex->cfg.quota);
	if (!ret)
		ret = tracker_meta_u64_set(ex->journal, META_CAPTURE_MODE, ex->graphs.capture_mode);
	for (unsigned i = 0; i < ex->dev.count && !ret; i++)
		ret = tracker_meta_u64_set(ex->journal, EXEC_META_PEERS(i), ex->dev.list[i].peers);
	if (!ret)
		ret = tracker_reply_set(ex->journal, seq, reply, len);
	return ret;
}

static void *job_drain(void *arg)
{
	struct checkpoint_job *job = arg;
	struct exec *ex = job->ck->ex;
	uint64_t one = 1;
	int ret;

	/* The driver's current context is per thread. */
	ex->be->cuCtxSetCurrent(job->ctx);
	ret = capture_finish(job->ck->capture, &job->stats);
	/* A full store is the likely cause: say which write failed and that
	 * earlier snapshots are intact (snap_store_error). */
	if ((ret == -ENOSPC || ret == -EDQUOT) && snap_store_error(job->store)[0])
		snprintf(job->error, sizeof(job->error), "copying device memory failed: %s",
			 snap_store_error(job->store));
	else if (ret)
		snprintf(job->error, sizeof(job->error), "copying device memory failed: %s", strerror(-ret));
	if (!ret) {
		ret = snap_writer_commit(job->writer, &job->wstats);
		job->writer = NULL;
		if (ret)
			snprintf(job->error, sizeof(job->error), "committing the snapshot failed: %s",
				 snap_store_error(job->store));
	}
	job->status = ret;
	job->end_ns = monotonic_ns();
	if (write(job->done_fd, &one, sizeof(one)) < 0)
		pr_warn("cannot signal the end of a snapshot");
	return NULL;
}

int checkpoint_begin(struct checkpoint *ck, const struct checkpoint_request *req,
		     struct checkpoint_job **out, char *err, size_t errlen)
{
	struct exec *ex = ck->ex;
	struct snap_writer_config wcfg = { 0 };
	struct snap_store_config scfg = { 0 };
	struct capture_region *regions = NULL;
	struct checkpoint_job *job;
	struct capture *cap;
	char journal_copy[] = "/tmp/tern-journal-XXXXXX";
	int fd = -1, ret;
	CUresult res;

	/* Graph descriptions are written when a snapshot needs them. */
	exec_graph_journal_flush(ex);
	if (exec_ipc_snapshot_check(ex, err, errlen))
		return -EBUSY;
	if (!ex->journal || ex->journal_broken) {
		snprintf(err, errlen, "the session's journal is unavailable; the session cannot be snapshotted");
		return -EIO;
	}
	/* A capture in progress is driver state no journal holds, and the
	 * quiescing synchronisation would invalidate it. */
	if (exec_capture_active(ex)) {
		snprintf(err, errlen, "a stream capture is in progress; snapshot once it has ended");
		return -EBUSY;
	}
	job = calloc(1, sizeof(*job));
	if (!job)
		return -ENOMEM;
	job->ck = ck;
	job->seq = req->seq;
	job->done_fd = eventfd(0, EFD_CLOEXEC);
	snprintf(job->name, sizeof(job->name), "%s", req->name);
	snprintf(job->parent, sizeof(job->parent), "%s", req->parent ? req->parent : "");
	snprintf(job->session, sizeof(job->session), "%s", req->session);
	job->start_ns = monotonic_ns();
	/* Quiesce: no request is being served; let the devices finish what they have. */
	res = CUDA_SUCCESS;
	for (unsigned i = 0; i < ex->dev.count && res == CUDA_SUCCESS; i++) {
		res = exec_context_switch(ex, ex->dev.list[i].ctx);
		if (res == CUDA_SUCCESS)
			res = ex->be->cuCtxSynchronize();
	}
	if (res == CUDA_SUCCESS)
		res = exec_context_switch(ex, ex->dev.primary_ctx);
	if (res != CUDA_SUCCESS) {
		snprintf(err, errlen, "the device reports error %d; the session cannot be snapshotted", res);
		ret = -EIO;
		goto out_job;
	}
	job->quiesced_ns = monotonic_ns();
	/* Arrays live outside the arena: their contents go into the journal. */
	ret = exec_array_journal_flush(ex, err, errlen);
	if (ret)
		goto out_job;
	/* So does the part beside the CUDA executor's (OpenCL's objects). */
	if (ck->part.save) {
		ret = ck->part.save(ck->part.arg, ex->journal, err, errlen);
		if (ret)
			goto out_job;
	}
	/* Hashing and compression of the drain use every core. */
	scfg.workers = snap_store_workers_all();
	ret = snap_store_open(req->store_dir, &scfg, SNAP_STORE_CREATE, &job->store);
	if (ret) {
		snprintf(err, errlen, "cannot open the snapshot store %s: %s", req->store_dir, strerror(-ret));
		goto out_job;
	}
	wcfg.name = req->name;
	wcfg.parent = job->parent[0] ? job->parent : NULL;
	wcfg.session_id = req->session;
	wcfg.auth_flags = req->auth_flags;
	wcfg.owner_uid = req->owner_uid;
	/* ckpt migrate streams a round while it is written (snap_migrate.h). */
	wcfg.progress_log = 1;
	if (req->auth_flags & SNAP_AUTH_CREDENTIAL)
		memcpy(wcfg.credential, req->credential, sizeof(wcfg.credential));
	ex->be->cuDeviceGetName(ex->dev.name, sizeof(ex->dev.name), ex->dev.device);
	wcfg.device_name = ex->dev.name;
	{
		CUuuid uuid;

		if (ex->be->cuDeviceGetUuid(&uuid, ex->dev.device) == CUDA_SUCCESS)
			memcpy(wcfg.device_uuid, uuid.bytes, 16);
	}
	{
		int v = 0;

		ex->be->cuDriverGetVersion(&v);
		wcfg.driver_version = (uint32_t)v;
	}
	ret = snap_writer_begin(job->store, &wcfg, &job->writer);
	if (ret) {
		snprintf(err, errlen, "cannot start snapshot '%s': %s", req->name, snap_store_error(job->store));
		goto out_store;
	}
	job->store_ns = monotonic_ns();
	/* The journal first: it must describe exactly the memory captured now. */
	ret = checkpoint_state_save(ck, err, errlen);
	if (ret)
		goto out_writer;
	ret = journal_bookkeeping(ex, req->seq, req->reply, req->reply_len);
	if (!ret) {
		fd = mkstemp(journal_copy);
		ret = fd < 0 ? -errno : tracker_copy_fd(ex->journal, fd);
	}
	if (!ret)
		ret = snap_writer_journal_set(job->writer, fd);
	if (fd >= 0) {
		close(fd);
		unlink(journal_copy);
	}
	if (ret) {
		snprintf(err, errlen, "cannot copy the journal: %s", strerror(-ret));
		goto out_writer;
	}
	/* Every device's memory (what another session exported to this one is
	 * that session's: exec_ipc.c refuses a snapshot while any is open), then
	 * the guest's VMM mappings the device may access (the window lies above
	 * the arenas: addresses stay in order). */
	job->regions = ex->vmm.map_count;
	for (unsigned d = 0; d < ex->dev.count; d++)
		job->regions += arena_count(ex->dev.list[d].arena);
	regions = calloc(job->regions + 1, sizeof(*regions));
	if (!regions) {
		ret = -ENOMEM;
		goto out_writer;
	}
	job->regions = 0;
	for (unsigned d = 0; d < ex->dev.count; d++) {
		for (unsigned i = 0; i < arena_count(ex->dev.list[d].arena); i++) {
			const struct arena_alloc *al = arena_at(ex->dev.list[d].arena, i);

			if (al->imported)
				continue;
			regions[job->regions++] = (struct capture_region){ al->addr, al->size, 0 };
			job->bytes += al->size;
		}
	}
	for (unsigned i = 0; i < ex->vmm.map_count; i++) {
		const struct exec_vmm_map *m = &ex->vmm.maps[i];

		if (m->access == CU_MEM_ACCESS_FLAGS_PROT_NONE)
			continue;
		regions[job->regions++] = (struct capture_region){ m->addr, m->size, 0 };
		job->bytes += m->size;
	}
	job->journal_ns = monotonic_ns();
	ret = checkpoint_capture_get(ck, &cap);
	if (!ret)
		ret = capture_pause(cap, job->writer, regions, job->regions, &job->stats);
	free(regions);
	if (ret) {
		snprintf(err, errlen, "capturing device memory failed: %s", strerror(-ret));
		goto out_writer;
	}
	job->pause_ns = monotonic_ns();
	pr_info("snapshot '%s': pause %.2f ms: device sync %.2f, arrays and store %.2f, journal %.2f, "
		"capture %.2f (hash %.2f, shadow allocation %.2f, the rest copies)", job->name,
		(job->pause_ns - job->start_ns) / 1e6, (job->quiesced_ns - job->start_ns) / 1e6,
		(job->store_ns - job->quiesced_ns) / 1e6, (job->journal_ns - job->store_ns) / 1e6,
		job->stats.pause_ns / 1e6, job->stats.hash_ns / 1e6, job->stats.shadow_alloc_ns / 1e6);
	job->ctx = handle_table_get(ex->handles, ex->dev.primary_ctx, HANDLE_CONTEXT)->real;
	ret = pthread_create(&job->thread, NULL, job_drain, job);
	if (ret) {
		ret = -ret;
		capture_finish(cap, &job->stats);
		goto out_writer;
	}
	*out = job;
	return 0;
out_writer:
	snap_writer_abort(job->writer);
out_store:
	snap_store_close(job->store);
out_job:
	if (job->done_fd >= 0)
		close(job->done_fd);
	free(job);
	return ret;
}

int checkpoint_job_fd(const struct checkpoint_job *job)
{
	return job->done_fd;
}

int checkpoint_end(struct checkpoint_job *job, struct control_reply *result)
{
	struct control_snapshot_result *r = &result->snapshot;
	int ret;

	pthread_join(job->thread, NULL);
	ret = job->status;
	memset(result, 0, sizeof(*result));
	if (ret) {
		control_reply_error(result, "snapshot '%s': %s", job->name, job->error);
		snap_writer_abort(job->writer);
	} else {
		result->kind = CONTROL_REPLY_SNAPSHOT;
		snprintf(r->snapshot, sizeof(r->snapshot), "%s", job->name);
		snprintf(r->session, sizeof(r->session), "%s", job->session);
		snprintf(r->parent, sizeof(r->parent), "%s", job->parent);
		r->pause_ms = (job->pause_ns - job->start_ns) / 1e6;
		r->total_ms = (job->end_ns - job->start_ns) / 1e6;
		r->regions = job->regions;
		r->bytes = job->bytes;
		r->stored_bytes = job->wstats.stored_bytes;
		r->chunks = job->wstats.chunks;
		r->zero_chunks = job->wstats.zero_chunks;
		r->unchanged_chunks = job->wstats.unchanged_chunks;
		r->new_chunks = job->wstats.new_chunks;
		r->seq = job->seq;
		snprintf(r->hash, sizeof(r->hash), "%s", job->stats.engine == CAPTURE_ENGINE_KERNEL ? "gpu" : "cpu");
		r->hash_ms = job->stats.hash_ns / 1e6;
		r->shadowed_chunks = job->stats.chunks_shadowed;
		r->direct_chunks = job->stats.chunks_direct;
		r->drain_ms = job->stats.drain_ns / 1e6;
		r->capture_ms = job->stats.pause_ns / 1e6;
	}
	snap_store_close(job->store);
	close(job->done_fd);
	free(job);
	return ret;
}

/* ---- restore ---- */

struct restore_ctx {
	struct exec *ex;
	const struct checkpoint *ck;        /* ck->held: regions a prefill mapped */
	struct tracker *saved;
	char *err;
	size_t errlen;
	struct exec_object_record *objs;    /* texture and surface objects */
	unsigned obj_count, obj_cap;
	bool code_pass;                     /* restore_order_code's kinds, or all others */
};

static bool kind_is_code(uint32_t kind)
{
	for (size_t i = 0; i < sizeof(restore_order_code) / sizeof(restore_order_code[0]); i++)
		if (restore_order_code[i] == kind)
			return true;
	return false;
}

static int restore_object_defer(struct restore_ctx *rc, uint64_t handle, const struct tracker_object *o)
{
	struct exec_object_record *r;

	if (rc->obj_count == rc->obj_cap) {
		unsigned cap = rc->obj_cap ? rc->obj_cap * 2 : 16;
		void *p = realloc(rc->objs, cap * sizeof(*rc->objs));

		if (!p)
			return -ENOMEM;
		rc->objs = p;
		rc->obj_cap = cap;
	}
	r = &rc->objs[rc->obj_count];
	r->args = malloc(o->args_len ? o->args_len : 1);
	if (!r->args)
		return -ENOMEM;
	memcpy(r->args, o->args, o->args_len);
	r->handle = handle;
	r->kind = o->kind;
	r->args_len = o->args_len;
	r->value = exec_object_record_value(o->args, o->args_len);
	rc->obj_count++;
	return 0;
}

/* A function's or kernel's name, as exec_module.c journals it: u32 length, bytes. */
static const char *args_name(const struct tracker_object *o, char *buf, size_t cap)
{
	const uint8_t *a = o->args;
	uint32_t n;

	if (o->args_len < 4)
		return "";
	n = (uint32_t)a[0] | (uint32_t)a[1] << 8 | (uint32_t)a[2] << 16 | (uint32_t)a[3] << 24;
	if (n > o->args_len - 4 || n >= cap)
		return "";
	memcpy(buf, a + 4, n);
	buf[n] = 0;
	return buf;
}

static CUresult restore_callable(struct exec *ex, uint64_t handle, const struct tracker_object *o,
				 void *real)
{
	struct exec_kernel_info *ki = calloc(1, sizeof(*ki));
	CUresult res;

	if (!ki)
		return CUDA_ERROR_OUT_OF_MEMORY;
	res = o->kind == HANDLE_KERNEL ? exec_params_query(ex, NULL, real, &ki->params)
				       : exec_params_query(ex, real, NULL, &ki->params);
	if (res == CUDA_SUCCESS && handle_table_add_at(ex->handles, handle, real, o->parent, ki))
		res = CUDA_ERROR_OUT_OF_MEMORY;
	if (res != CUDA_SUCCESS) {
		exec_params_release(&ki->params);
		free(ki);
	}
	return res;
}

static uint32_t args_u32(const struct tracker_object *o, uint32_t at)
{
	const uint8_t *a = (const uint8_t *)o->args + at;

	return (uint32_t)a[0] | (uint32_t)a[1] << 8 | (uint32_t)a[2] << 16 | (uint32_t)a[3] << 24;
}

/* Objects are made in the context they belonged to: a device's primary
 * context (0: device 0's, what snapshots before several devices held). */
static int restore_switch(struct restore_ctx *rc, uint64_t ctx)
{
	struct exec *ex = rc->ex;

	if (!ctx)
		ctx = ex->dev.primary_ctx;
	if (exec_device_of_ctx(ex, ctx) < 0 || exec_context_switch(ex, ctx) != CUDA_SUCCESS) {
		snprintf(rc->err, rc->errlen, "an object names context 0x%llx, which the session lacks",
			 (unsigned long long)ctx);
		return -1;
	}
	return 0;
}

static int restore_object(void *arg, uint64_t handle, const struct tracker_object *o)
{
	struct restore_ctx *rc = arg;
	struct exec *ex = rc->ex;
	struct handle_entry *parent = o->parent ? handle_table_get(ex->handles, o->parent,
								    handle_kind_of(o->parent)) : NULL;
	struct tracker_image im;
	const void *bytes = NULL;
	char name[WIRE_STR_MAX + 1];
	void *real = NULL, *image = NULL;
	CUresult res = CUDA_SUCCESS;

	/* The part beside the executor restores its own kinds (below). */
	if (o->kind >= rc->ck->part.kind_first && o->kind <= rc->ck->part.kind_last && rc->ck->part.restore)
		return 0;
	/* A walk visits every object (kinds it was not given last): each pass
	 * takes its own. */
	if (kind_is_code(o->kind) != rc->code_pass)
		return 0;
	if (o->parent && !parent) {
		snprintf(rc->err, rc->errlen, "object 0x%llx names a parent 0x%llx the snapshot lacks",
			 (unsigned long long)handle, (unsigned long long)o->parent);
		return -EBADMSG;
	}
	switch (o->kind) {
	case HANDLE_CONTEXT:
		/* The devices' primary contexts exist already under the same
		 * handles; a context the app created names its device's as its
		 * parent (exec_ctx_create). */
		if (!o->parent && exec_device_of_ctx(ex, handle) >= 0)
			return 0;
		if (!parent || parent->parent || exec_device_of_ctx(ex, o->parent) < 0) {
			snprintf(rc->err, rc->errlen, "context 0x%llx is neither a device's primary context "
				 "nor a second name for one", (unsigned long long)handle);
			return -EBADMSG;
		}
		real = parent->real;
		break;
	case HANDLE_MODULE:
	case HANDLE_LIBRARY:
		if (parent) {           /* a library's module */
			res = ex->be->cuLibraryGetModule((CUmodule *)&real, parent->real);
			break;
		}
		if ((o->args_len != TRACKER_HASH_SIZE &&
		     !(o->kind == HANDLE_MODULE && o->args_len == TRACKER_HASH_SIZE + 4)) ||
		    tracker_image_get(rc->saved, o->args, &im, &bytes)) {
			snprintf(rc->err, rc->errlen, "module 0x%llx: image missing from the journal",
				 (unsigned long long)handle);
			return -EBADMSG;
		}
		/* A module loads into its device's context (exec_journal.c). */
		if (restore_switch(rc, o->args_len == TRACKER_HASH_SIZE + 4 ?
				   (args_u32(o, TRACKER_HASH_SIZE) < ex->dev.count ?
				    ex->dev.list[args_u32(o, TRACKER_HASH_SIZE)].ctx : UINT64_MAX) : ex->dev.primary_ctx))
			return -EBADMSG;
		image = aligned_alloc(64, (im.size + 64) / 64 * 64);
		if (!image)
			return -ENOMEM;
		memcpy(image, bytes, im.size);
		((uint8_t *)image)[im.size] = 0;
		if (o->kind == HANDLE_MODULE)
			res = ex->be->cuModuleLoadData((CUmodule *)&real, image);
		else
			res = ex->be->cuLibraryLoadData((CUlibrary *)&real, image, NULL, NULL, 0, NULL, NULL, 0);
		if (res == CUDA_SUCCESS && ex->journal) {
			uint8_t hash[TRACKER_HASH_SIZE];

			tracker_image_ref(ex->journal, image, im.size, 0, hash);
		}
		/* Its globals count in the restored session's quota as they did. */
		if (res == CUDA_SUCCESS && exec_image_charge(ex, handle, image, im.size + 1) != CUDA_SUCCESS) {
			if (o->kind == HANDLE_MODULE)
				ex->be->cuModuleUnload(real);
			else
				ex->be->cuLibraryUnload(real);
			res = CUDA_ERROR_OUT_OF_MEMORY;
		}
		free(image);
		break;
	case HANDLE_KERNEL:
		res = parent ? ex->be->cuLibraryGetKernel((CUkernel *)&real, parent->real,
							  args_name(o, name, sizeof(name)))
			     : CUDA_ERROR_INVALID_HANDLE;
		if (res == CUDA_SUCCESS)
			res = restore_callable(ex, handle, o, real);
		if (res == CUDA_SUCCESS)
			res = checkpoint_state_func(ex, o, real);
		goto journal;
	case HANDLE_FUNCTION:
		if (parent && parent->kind == HANDLE_MODULE)
			res = ex->be->cuModuleGetFunction((CUfunction *)&real, parent->real,
							  args_name(o, name, sizeof(name)));
		else if (parent && parent->kind == HANDLE_KERNEL)
			res = ex->be->cuKernelGetFunction((CUfunction *)&real, parent->real);
		else
			res = CUDA_ERROR_INVALID_HANDLE;
		if (res == CUDA_SUCCESS)
			res = restore_callable(ex, handle, o, real);
		if (res == CUDA_SUCCESS)
			res = checkpoint_state_func(ex, o, real);
		goto journal;
	case HANDLE_STREAM: {
		uint32_t flags = 0;
		int32_t prio = 0;

		/* u32 flags, i32 priority, then its attributes */
		if (o->args_len >= 8) {
			memcpy(&flags, o->args, 4);
			memcpy(&prio, (const uint8_t *)o->args + 4, 4);
		}
		if (restore_switch(rc, o->parent))
			return -EBADMSG;
		res = ex->be->cuStreamCreateWithPriority((CUstream *)&real, flags, prio);
		if (res == CUDA_SUCCESS) {
			res = checkpoint_state_stream(ex, o, real);
			if (res != CUDA_SUCCESS)
				ex->be->cuStreamDestroy(real);
		}
		break;
	}
	case HANDLE_EVENT: {
		uint32_t flags = 0;

		if (o->args_len == 4)
			memcpy(&flags, o->args, 4);
		if (restore_switch(rc, o->parent))
			return -EBADMSG;
		res = ex->be->cuEventCreate((CUevent *)&real, flags);
		break;
	}
	case HANDLE_VMM:
		return 0;       /* back before the regions: exec_vmm_restore_begin() */
	case HANDLE_MEMPOOL:
		/* The worker's own object: nothing to ask of the backend. */
		res = exec_pool_restore(ex, handle, o->args, o->args_len);
		goto journal;
	case HANDLE_GRAPH:
	case HANDLE_GRAPH_EXEC:
		/* args: the description's hash [, u64 flags, u64 origin graph] */
		if (o->args_len != (o->kind == HANDLE_GRAPH ? TRACKER_HASH_SIZE : TRACKER_HASH_SIZE + 16) ||
		    tracker_image_get(rc->saved, o->args, &im, &bytes)) {
			snprintf(rc->err, rc->errlen, "graph 0x%llx: description missing from the journal",
				 (unsigned long long)handle);
			return -EBADMSG;
		}
		res = exec_graph_restore(ex, handle, o->kind, o->args, o->args_len, bytes, im.size,
					 rc->err, rc->errlen);
		if (res != CUDA_SUCCESS)
			return -EIO;
		return 0;       /* journaled by the executor with its description */
	case HANDLE_ARRAY:
	case HANDLE_MIPMAP:
		res = exec_array_restore(ex, handle, o->kind, o->parent, o->args, o->args_len, rc->saved, rc->err,
					 rc->errlen);
		return res == CUDA_SUCCESS ? 0 : -EIO;  /* journaled by the executor */
	case HANDLE_TEXOBJ:
	case HANDLE_SURFOBJ:
		return restore_object_defer(rc, handle, o);
	default:
		snprintf(rc->err, rc->errlen, "object 0x%llx of unknown kind %u", (unsigned long long)handle, o->kind);
		return -EBADMSG;
	}
	if (res == CUDA_SUCCESS && handle_table_add_at(ex->handles, handle, real, o->parent, NULL))
		res = CUDA_ERROR_OUT_OF_MEMORY;
journal:
	if (res != CUDA_SUCCESS) {
		snprintf(rc->err, rc->errlen, "recreating object 0x%llx (kind %u) failed with CUDA error %d",
			 (unsigned long long)handle, o->kind, res);
		return -EIO;
	}
	exec_journal_object(ex, handle, (enum handle_kind)o->kind, o->parent, o->args, o->args_len);
	return 0;
}

static int restore_region(void *arg, uint64_t addr, const struct tracker_region *r)
{
	struct restore_ctx *rc = arg;
	CUresult res;

	if (r->kind > EXEC_REGION_MANAGED) {
		snprintf(rc->err, rc->errlen, "region 0x%llx of unknown kind %u", (unsigned long long)addr,
			 r->kind);
		return -EBADMSG;
	}
	if (r->kind == EXEC_REGION_VMM)
		return exec_vmm_restore_map(rc->ex, addr, r->size, r->owner, r->flags, rc->err, rc->errlen);
	struct arena *a = exec_arena_of(rc->ex, addr, NULL);

	if (checkpoint_held_find(rc->ck, addr, r->size))
		res = a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;    /* mapped by a prefill */
	else
		res = a ? arena_alloc_at(a, addr, r->size) : CUDA_ERROR_INVALID_VALUE;
	if (res != CUDA_SUCCESS) {
		snprintf(rc->err, rc->errlen, "cannot map 0x%llx+%llu again (CUDA error %d)",
			 (unsigned long long)addr, (unsigned long long)r->size, res);
		return -ENOMEM;
	}
	/* A graph allocation: the graphs restored later take their references. */
	if ((r->kind == EXEC_REGION_GRAPH || r->kind == EXEC_REGION_GRAPH_FREED) &&
	    exec_graph_alloc_restore(rc->ex, addr, r->size, r->kind == EXEC_REGION_GRAPH_FREED))
		return -ENOMEM;
	if (handle_kind_of(r->owner) == HANDLE_MEMPOOL &&
	    exec_pool_restore_alloc(rc->ex, addr, r->size, arena_find(a, addr)->mapped,
				    r->owner))
		return -ENOMEM;
	exec_journal_region_as(rc->ex, addr, r->size, (enum exec_region_kind)r->kind, r->owner, 0);
	return 0;
}

int checkpoint_restore(struct checkpoint *ck, const char *store_dir, const char *name,
		       uint64_t *seq, void **reply, size_t *reply_len, struct control_reply *result)
{
	struct exec *ex = ck->ex;
	struct checkpoint_saved snap;
	struct snap_store *store;
	struct snap_reader *reader;
	struct tracker *saved;
	struct capture_stats stats = { 0 };
	struct restore_ctx rc = { .ex = ex, .ck = ck };
	char err[512] = "";
	const void *r;
	size_t rlen;
	uint64_t v, t0 = monotonic_ns(), t_open = 0, t_mapped = 0, t_staging = 0, devices = 1;
	CUresult res;
	struct capture *capt;
	int ret;

	rc.err = err;
	rc.errlen = sizeof(err);
	ret = checkpoint_saved_open(&snap, store_dir, name, err, sizeof(err));
	store = snap.store;
	reader = snap.reader;
	saved = snap.journal;
	if (ret)
		goto out;
	t_open = monotonic_ns();
	rc.saved = saved;
	ret = checkpoint_target_check(saved, name, &(struct checkpoint_target){
					      .arena_base = arena_base(ex->dev.arena), .arena_size = arena_size(ex->dev.arena),
					      .devices = ex->dev.count, .quota = ex->cfg.quota }, err, sizeof(err));
	if (ret)
		goto out;
	if (tracker_meta_u64_get(saved, EXEC_META_DEVICE_COUNT, &devices))
		devices = 1;
	/* A prefill mapped and filled what the snapshot before held: what
	 * this one lacks goes, and the staging buffers the prefill allocated
	 * go before the modules load, as in a fresh worker, where the driver
	 * can place their __managed__ variables where they were. */
	ret = checkpoint_held_trim(ck, saved, snap_reader_chunk_list(reader));
	if (!ret && ck->held && checkpoint_state_has_managed_globals(saved)) {
		capture_close(ck->capture);
		ck->capture = NULL;
	}
	if (!ret)
		ret = exec_vmm_restore_begin(ex, saved, err, sizeof(err));
	if (!ret)
		ret = tracker_region_foreach(saved, restore_region, &rc);
	rc.code_pass = true;
	if (!ret)
		ret = tracker_object_foreach(saved, restore_order_code,
					     sizeof(restore_order_code) / sizeof(restore_order_code[0]),
					     restore_object, &rc);
	rc.code_pass = false;
	if (!ret)
		ret = checkpoint_state_globals_place(ex, saved, err, sizeof(err));
	t_mapped = monotonic_ns();
	if (!ret)
		ret = checkpoint_capture_get(ck, &capt);
	t_staging = monotonic_ns();
	if (!ret) {
		ret = capture_fill(capt, reader, &(struct capture_fill_base){ .held = ck->held }, &stats);
		if (ret && !err[0])
			snprintf(err, sizeof(err), "filling device memory failed: %s (%s); run `ckpt verify %s`",
				 strerror(-ret), snap_store_error(store), name);
	}
	if (!ret)
		ret = exec_vmm_restore_finish(ex, err, sizeof(err));
	if (!ret)
		ret = checkpoint_state_restore_ctx(ex, saved, err, sizeof(err));
	if (!ret)
		ret = tracker_object_foreach(saved, restore_order,
					     sizeof(restore_order) / sizeof(restore_order[0]),
					     restore_object, &rc);
	/* What follows is made in device 0's context, as the objects were
	 * (restore_object left the last object's current). */
	if (!ret)
		ret = restore_switch(&rc, 0);
	if (!ret)
		ret = checkpoint_state_restore_late(ex, saved, err, sizeof(err));
	if (!ret)
		ret = restore_switch(&rc, 0);
	if (!ret)
		ret = exec_texobj_restore_all(ex, rc.objs, rc.obj_count, err, sizeof(err));
	for (unsigned i = 0; i < devices && !ret; i++) {
		if (tracker_meta_u64_get(saved, EXEC_META_PEERS(i), &v) || !v)
			continue;
		res = exec_peer_restore(ex, i, (uint32_t)v);
		if (res != CUDA_SUCCESS) {
			snprintf(err, sizeof(err), "enabling peer access of device %u again failed with "
				 "CUDA error %d", i, res);
			ret = -EIO;
		}
	}
	if (!ret && ck->part.restore)
		ret = ck->part.restore(ck->part.arg, saved, err, sizeof(err));
	if (ret)
		goto out;
	exec_context_switch(ex, ex->dev.primary_ctx);
	exec_pool_restore_finish(ex);
	for (uint32_t k = HANDLE_CONTEXT; k < HANDLE_KIND_MAX; k++)
		if (!tracker_meta_u64_get(saved, META_NEXT_SERIAL(k), &v))
			handle_table_next_serial_set(ex->handles, (enum handle_kind)k, v);
	if (!tracker_meta_u64_get(saved, META_CAPTURE_MODE, &v) && v <= CU_STREAM_CAPTURE_MODE_RELAXED) {
		CUstreamCaptureMode mode = (CUstreamCaptureMode)v;

		if (ex->be->cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS)
			ex->graphs.capture_mode = (uint32_t)v;
	}
	ret = tracker_reply_get(saved, seq, &r, &rlen);
	if (ret) {
		snprintf(err, sizeof(err), "snapshot '%s' records no sequence number", name);
		goto out;
	}
	*reply = malloc(rlen ? rlen : 1);
	if (!*reply) {
		ret = -ENOMEM;
		goto out;
	}
	memcpy(*reply, r, rlen);
	*reply_len = rlen;
	exec_mem_publish(ex);
	{
		const void *sid = NULL;
		size_t sid_len = 0;
		unsigned regions = ex->vmm.map_count;
		struct control_restore_result *done = &result->restore;

		for (unsigned d = 0; d < ex->dev.count; d++)
			regions += arena_count(ex->dev.list[d].arena);

		tracker_meta_bytes_get(saved, TRACKER_META_SESSION_ID, &sid, &sid_len);
		memset(result, 0, sizeof(*result));
		result->kind = CONTROL_REPLY_RESTORE;
		snprintf(done->snapshot, sizeof(done->snapshot), "%s", name);
		snprintf(done->session, sizeof(done->session), "%.*s",
			 (int)(sid_len < CONTROL_NAME_MAX ? sid_len : CONTROL_NAME_MAX), sid ? (const char *)sid : "");
		done->pid = (int32_t)getpid();
		done->device = ex->cfg.device;
		done->restore_ms = (monotonic_ns() - t0) / 1e6;
		done->fill_ms = stats.fill_ns / 1e6;
		pr_info("restore of '%s': %.1f ms: snapshot and journal open %.1f, regions mapped and "
			"code loaded %.1f, staging %.1f, fill %.1f (%.2f GiB written, %.1f GB/s), the "
			"rest %.1f", name, done->restore_ms, (t_open - t0) / 1e6, (t_mapped - t_open) / 1e6,
			(t_staging - t_mapped) / 1e6, done->fill_ms,
			(stats.fill_bytes - stats.fill_bytes_held) / 1073741824.0,
			stats.fill_bytes_per_s / 1e9, (monotonic_ns() - t_staging - stats.fill_ns) / 1e6);
		done->seq = *seq;
		done->regions = regions;
		done->bytes = exec_mem_used(ex);
	}
out:
	if (ck->held && !ret)
		pr_info("restore of '%s': %.2f GiB of %.2f GiB were prefilled", name,
			stats.fill_bytes_held / 1073741824.0, stats.fill_bytes / 1073741824.0);
	/* The memory is the session's now, whatever a prefill left there. */
	checkpoint_held_free(ck);
	if (ret) {
		pr_err("restore of '%s' failed: %s", name, err[0] ? err : strerror(-ret));
		control_reply_error(result, "restore of '%s' failed: %s", name, err[0] ? err : strerror(-ret));
	}
	for (unsigned i = 0; i < rc.obj_count; i++)
		free(rc.objs[i].args);
	free(rc.objs);
	checkpoint_saved_close(&snap);
	return ret;
}
