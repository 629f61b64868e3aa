/* The device thread, its command FIFO, streams and events.
 *
 * Each device runs one thread that executes its commands in submission order,
 * whatever their stream: stronger ordering than a GPU gives, which every
 * correct CUDA program accepts. One exception keeps programs that a GPU
 * runs from hanging: a command that cannot start yet (a stream memory wait
 * whose value is not there, a wait for an event not reached) parks its
 * stream, and the thread runs the first later command that orders after
 * nothing parked (sim_cmd_pick). Streams count what they submitted and what
 * completed, so stream and event queries answer as the driver does.
 */
#define LOG_PREFIX "sim: "

#include "sim.h"
#include "monotonic.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"


struct sim_cmd *sim_cmd_new(enum sim_cmd_kind kind)
{
	struct sim_cmd *cmd = calloc(1, sizeof(*cmd));

	if (cmd)
		cmd->kind = kind;
	return cmd;
}

void sim_cmd_free(struct sim_cmd *cmd)
{
	if (!cmd)
		return;
	if (cmd->kind == SIM_CMD_COPY)
		free(cmd->copy.staging);
	if (cmd->kind == SIM_CMD_KERNEL)
		free(cmd->kernel.block);
	if (cmd->kind == SIM_CMD_COND)
		sim_cond_cmd_release(sim_self, cmd);
	free(cmd);
}

uint64_t sim_cmd_submit(struct sim *sim, struct sim_stream *stream, struct sim_cmd *cmd)
{
	struct sim_dev *dev = stream->ctx->dev;

	cmd->stream = stream;
	cmd->seq = ++dev->submitted;
	stream->submitted++;
	if (cmd->kind == SIM_CMD_EVENT || cmd->kind == SIM_CMD_WAIT)
		cmd->event.ev->pending++;
	cmd->next = NULL;
	if (dev->tail)
		dev->tail->next = cmd;
	else
		dev->head = cmd;
	dev->tail = cmd;
	pthread_cond_signal(&dev->work);
	return cmd->seq;
}

static void sim_stream_unlink(struct sim *sim, struct sim_stream *s)
{
	for (struct sim_stream **p = &sim->streams; *p; p = &(*p)->next)
		if (*p == s) {
			*p = s->next;
			return;
		}
}

static void sim_event_unlink(struct sim *sim, struct sim_event *e)
{
	for (struct sim_event **p = &sim->events; *p; p = &(*p)->next)
		if (*p == e) {
			*p = e->next;
			return;
		}
}

void sim_cmd_run(struct sim *sim, struct sim_cmd *cmd)
{
	struct sim_ctx *ctx = cmd->stream->ctx;

	switch (cmd->kind) {
	case SIM_CMD_COPY:
		memmove(cmd->copy.dst, cmd->copy.staging ? cmd->copy.staging : cmd->copy.src,
			cmd->copy.bytes);
		break;
	case SIM_CMD_MEMSET:
		if (cmd->memset.elem == 1) {
			memset(cmd->memset.dst, (int)cmd->memset.value, cmd->memset.count);
		} else if (cmd->memset.elem == 2) {
			uint16_t *p = cmd->memset.dst;

			for (size_t i = 0; i < cmd->memset.count; i++)
				p[i] = (uint16_t)cmd->memset.value;
		} else {
			uint32_t *p = cmd->memset.dst;

			for (size_t i = 0; i < cmd->memset.count; i++)
				p[i] = cmd->memset.value;
		}
		break;
	case SIM_CMD_KERNEL:
		/* A poisoned context runs nothing more, as on a GPU. */
		if (__atomic_load_n(&ctx->sticky, __ATOMIC_ACQUIRE) == CUDA_SUCCESS)
			sim_kernel_run(cmd, ctx);
		break;
	case SIM_CMD_EVENT:
		cmd->event.ev->time_ns = monotonic_ns();
		break;
	case SIM_CMD_WAIT: {
		/* Picked once the event was reached (sim_cmd_ready), unless the
		 * device stops. */
		struct sim_event *ev = cmd->event.ev;

		pthread_mutex_lock(&sim->lock);
		while (ev->done < cmd->event.gen && !sim->stopping)
			pthread_cond_wait(&sim->done, &sim->lock);
		pthread_mutex_unlock(&sim->lock);
		break;
	}
	case SIM_CMD_HOST:
		/* The guest's function may block (tern's host functions wait for
		 * the guest): it holds this device's FIFO, as a host function
		 * holds its stream on a GPU, but never the lock. */
		if (cmd->host.fn)
			cmd->host.fn(cmd->host.data);
		else
			cmd->host.cb(cmd->host.hstream, __atomic_load_n(&ctx->sticky, __ATOMIC_ACQUIRE),
				     cmd->host.data);
		break;
	case SIM_CMD_VALUE:
		sim_value_run(sim, cmd);
		break;
	case SIM_CMD_COND:
		sim_cond_run(sim, cmd);
		break;
	}
}

/* Publish a completed command; lock held. */
static void sim_cmd_complete(struct sim *sim, struct sim_dev *dev, struct sim_cmd *cmd)
{
	struct sim_stream *s = cmd->stream;

	if (cmd->kind == SIM_CMD_EVENT || cmd->kind == SIM_CMD_WAIT) {
		struct sim_event *ev = cmd->event.ev;

		if (cmd->kind == SIM_CMD_EVENT && cmd->event.gen > ev->done)
			ev->done = cmd->event.gen;
		if (--ev->pending == 0 && ev->destroyed) {
			sim_node_set_clear(&ev->cdeps);
			free(ev);
		}
	}
	/* Commands may complete out of order (a parked stream): completed is
	 * the point up to which everything has. */
	dev->completed = dev->head ? dev->head->seq - 1 : dev->submitted;
	s->completed++;
	if (s->destroyed && s->completed == s->submitted)
		free(s);
	sim_cmd_free(cmd);
	pthread_cond_broadcast(&sim->done);
}

/* Streams that parked while one pick scanned the FIFO. */
#define SIM_PARKED_MAX 64

struct sim_parked {
	unsigned count;
	struct sim_stream *streams[SIM_PARKED_MAX];
};

static bool sim_parked_has(const struct sim_parked *pk, const struct sim_stream *s)
{
	for (unsigned i = 0; i < pk->count; i++)
		if (pk->streams[i] == s)
			return true;
	return false;
}

static bool sim_stream_blocking(const struct sim_stream *s)
{
	return s == s->ctx->legacy || !(s->flags & CU_STREAM_NON_BLOCKING);
}

/* Whether @s must wait for a parked stream: its own commands stay in order,
 * and the legacy stream and blocking streams of one context order against
 * each other (the driver's implicit synchronisation). */
static bool sim_parked_orders(const struct sim_parked *pk, const struct sim_stream *s)
{
	if (sim_parked_has(pk, s))
		return true;
	for (unsigned i = 0; i < pk->count; i++) {
		const struct sim_stream *p = pk->streams[i];

		if (p->ctx != s->ctx || !sim_stream_blocking(p) || !sim_stream_blocking(s))
			continue;
		if (p == p->ctx->legacy || s == s->ctx->legacy)
			return true;
	}
	return false;
}

/* Whether @cmd could start now; lock held. Everything but an unmet wait
 * can. When the device stops, waits end. */
static bool sim_cmd_ready(struct sim *sim, const struct sim_cmd *cmd)
{
	if (sim->stopping)
		return true;
	if (cmd->kind == SIM_CMD_VALUE)
		return sim_value_ready(cmd);
	if (cmd->kind == SIM_CMD_WAIT)
		return cmd->event.ev->done >= cmd->event.gen;
	return true;
}

/* The first command that may run, unlinked from the FIFO, or NULL. *@parked
 * says whether a command waits for a condition no submission signals (a
 * value, another device's event), so the caller must look again; lock held. */
static struct sim_cmd *sim_cmd_pick(struct sim *sim, struct sim_dev *dev, bool *parked)
{
	struct sim_parked pk = { 0 };
	struct sim_cmd **link = &dev->head, *prev = NULL;

	*parked = false;
	for (struct sim_cmd *cmd = dev->head; cmd; prev = cmd, link = &cmd->next, cmd = cmd->next) {
		bool behind = sim_parked_orders(&pk, cmd->stream);

		if (!behind && sim_cmd_ready(sim, cmd)) {
			*link = cmd->next;
			if (dev->tail == cmd)
				dev->tail = prev;
			return cmd;
		}
		if (!behind)
			*parked = true;
		if (!sim_parked_has(&pk, cmd->stream)) {
			/* Too many parked streams to track: later commands wait too. */
			if (pk.count == SIM_PARKED_MAX)
				return NULL;
			pk.streams[pk.count++] = cmd->stream;
		}
	}
	return NULL;
}

/* How often a device with parked commands looks at their conditions again. */
#define SIM_PARKED_POLL_NS 20000L

static void *sim_dev_main(void *arg)
{
	struct sim_dev *dev = arg;
	struct sim *sim = dev->sim;
	struct sim_cmd *cmd;
	void *altstack = sim_fault_thread_init();
	bool parked;

	pthread_mutex_lock(&sim->lock);
	for (;;) {
		while (!dev->head && !sim->stopping)
			pthread_cond_wait(&dev->work, &sim->lock);
		if (!dev->head)
			break;
		cmd = sim_cmd_pick(sim, dev, &parked);
		if (!cmd) {
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += SIM_PARKED_POLL_NS;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			/* A submission wakes us at once; a value or another
			 * device's event is looked at again shortly. */
			if (parked)
				pthread_cond_timedwait(&dev->work, &sim->lock, &ts);
			else
				pthread_cond_wait(&dev->work, &sim->lock);
			continue;
		}
		pthread_mutex_unlock(&sim->lock);
		sim_cmd_run(sim, cmd);
		pthread_mutex_lock(&sim->lock);
		sim_cmd_complete(sim, dev, cmd);
	}
	pthread_mutex_unlock(&sim->lock);
	sim_fault_thread_release(altstack);
	return NULL;
}

int sim_dev_start(struct sim_dev *dev)
{
	int ret = pthread_create(&dev->thread, NULL, sim_dev_main, dev);

	if (ret)
		return -ret;
	dev->thread_started = true;
	return 0;
}

/* Drains the queue first: close is a synchronisation point. */
void sim_dev_stop(struct sim_dev *dev)
{
	struct sim *sim = dev->sim;

	if (!dev->thread_started)
		return;
	pthread_mutex_lock(&sim->lock);
	sim_dev_wait(sim, dev, dev->submitted);
	sim->stopping = true;
	pthread_cond_broadcast(&dev->work);
	pthread_cond_broadcast(&sim->done);
	pthread_mutex_unlock(&sim->lock);
	pthread_join(dev->thread, NULL);
	dev->thread_started = false;
}

void sim_dev_wait(struct sim *sim, struct sim_dev *dev, uint64_t seq)
{
	while (dev->completed < seq && dev->thread_started)
		pthread_cond_wait(&sim->done, &sim->lock);
}

void sim_all_wait(struct sim *sim)
{
	for (unsigned i = 0; i < sim->dev_count; i++)
		sim_dev_wait(sim, &sim->devs[i], sim->devs[i].submitted);
}

struct sim_stream *sim_stream_new(struct sim_ctx *ctx, unsigned flags, int priority,
				  bool builtin)
{
	struct sim_stream *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->ctx = ctx;
	s->flags = flags;
	s->priority = priority;
	s->builtin = builtin;
	return s;
}

/* Lock held; the device is idle for ctx (its caller waited). */
void sim_ctx_streams_destroy(struct sim *sim, struct sim_ctx *ctx)
{
	struct sim_stream **ps = &sim->streams;
	struct sim_event **pe = &sim->events;

	while (*ps) {
		struct sim_stream *s = *ps;

		if (s->ctx == ctx) {
			*ps = s->next;
			free(s);
		} else {
			ps = &s->next;
		}
	}
	while (*pe) {
		struct sim_event *e = *pe;

		if (e->ctx == ctx) {
			*pe = e->next;
			sim_event_capture_clear(e);
			/* Graph nodes still name it: freed with the last of them. */
			if (e->pending)
				e->destroyed = true;
			else
				free(e);
		} else {
			pe = &e->next;
		}
	}
}

CUresult sim_stream_resolve(struct sim *sim, CUstream h, struct sim_ctx *ctx,
			    struct sim_stream **out)
{
	if (h == NULL || h == CU_STREAM_LEGACY) {
		*out = ctx->legacy;
		return CUDA_SUCCESS;
	}
	if (h == CU_STREAM_PER_THREAD) {
		*out = ctx->per_thread;
		return CUDA_SUCCESS;
	}
	for (struct sim_stream *s = sim->streams; s; s = s->next)
		if ((CUstream)s == h && !s->builtin) {
			/* A stream of another context is not usable here. */
			if (s->ctx != ctx)
				return CUDA_ERROR_INVALID_HANDLE;
			*out = s;
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_INVALID_HANDLE;
}

CUresult sim_event_lookup(struct sim *sim, CUevent h, struct sim_event **out)
{
	for (struct sim_event *e = sim->events; e; e = e->next)
		if ((CUevent)e == h) {
			*out = e;
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_INVALID_HANDLE;
}

CUresult sim_enter_stream(CUstream h, struct sim **psim, struct sim_stream **ps)
{
	struct sim_ctx *ctx;
	CUresult rc;

	rc = sim_enter(psim);
	if (rc)
		return rc;
	rc = sim_ctx_require(*psim, &ctx);
	if (!rc)
		rc = sim_stream_resolve(*psim, h, ctx, ps);
	if (rc)
		sim_leave(*psim);
	return rc;
}

static CUresult sim_stream_create(CUstream *ph, unsigned flags, int priority)
{
	struct sim_stream *s;
	struct sim_ctx *ctx;
	struct sim *sim;
	CUresult rc;

	if (!ph || flags & ~(unsigned)CU_STREAM_NON_BLOCKING)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_ctx_require(sim, &ctx);
	if (rc)
		goto out;
	/* Out-of-range priorities are clamped, as documented. */
	if (priority > 0)
		priority = 0;
	if (priority < -5)
		priority = -5;
	s = sim_stream_new(ctx, flags, priority, false);
	if (!s) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	s->next = sim->streams;
	sim->streams = s;
	*ph = (CUstream)s;
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuStreamCreate(CUstream *ph, unsigned int flags)
{
	return sim_stream_create(ph, flags, 0);
}

CUresult sim_cuStreamCreateWithPriority(CUstream *ph, unsigned int flags, int priority)
{
	return sim_stream_create(ph, flags, priority);
}

CUresult sim_cuStreamDestroy(CUstream h)
{
	struct sim_stream *s;
	struct sim *sim;
	CUresult rc;

	rc = sim_enter_stream(h, &sim, &s);
	if (rc)
		return rc;
	if (s->builtin) {
		rc = CUDA_ERROR_INVALID_HANDLE;
		goto out;
	}
	/* A capture cannot go on without its origin stream. Another stream
	 * of it leaves the capture (NVIDIA's graphMemoryNodes destroys one
	 * it joined back); its last work must still be joined by the end. */
	if (s->capture) {
		struct sim_capture *cap = s->capture;

		if (cap->origin == s) {
			sim_captures_drop_one(sim, cap);
		} else {
			for (unsigned i = 0; i < s->cdeps.count; i++)
				if (sim_node_set_add(&cap->departed, s->cdeps.nodes[i]))
					cap->invalidated = true;        /* out of memory: cannot tell */
			s->capture = NULL;
			sim_node_set_clear(&s->cdeps);
		}
	}
	/* Work already queued still runs; the stream goes when it is done. */
	sim_stream_unlink(sim, s);
	if (s->completed == s->submitted)
		free(s);
	else
		s->destroyed = true;
out:
	sim_leave(sim);
	return rc;
}

/* Wait for what the stream had queued at the call; lock held. */
static void sim_stream_wait(struct sim *sim, struct sim_stream *s)
{
	uint64_t target = s->submitted;

	while (s->completed < target && s->ctx->dev->thread_started)
		pthread_cond_wait(&sim->done, &sim->lock);
}

CUresult sim_cuStreamSynchronize(CUstream h)
{
	struct sim_stream *s;
	struct sim *sim;
	CUresult rc;

	rc = sim_enter_stream(h, &sim, &s);
	if (rc)
		return rc;
	rc = sim_capture_sync_check(sim, s->ctx, s);
	if (rc)
		goto out;
	/* The legacy stream synchronises with every blocking stream; the
	 * device FIFO already orders them, so waiting for the device's
	 * submissions so far is both correct and what the driver waits for. */
	if (s == s->ctx->legacy)
		sim_dev_wait(sim, s->ctx->dev, s->ctx->dev->submitted);
	else
		sim_stream_wait(sim, s);
	rc = s->ctx->sticky;
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuStreamQuery(CUstream h)
{
	struct sim_stream *s;
	struct sim *sim;
	CUresult rc;

	rc = sim_enter_stream(h, &sim, &s);
	if (rc)
		return rc;
	rc = sim_capture_sync_check(sim, s->ctx, s);
	if (!rc)
		rc = s->ctx->sticky;
	if (!rc && s->completed < s->submitted)
		rc = CUDA_ERROR_NOT_READY;
	sim_leave(sim);
	return rc;
}

CUresult sim_cuStreamWaitEvent(CUstream h, CUevent hev, unsigned int flags)
{
	struct sim_stream *s;
	struct sim_event *ev;
	struct sim_cmd *cmd;
	struct sim *sim;
	CUresult rc;

	if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter_stream(h, &sim, &s);
	if (rc)
		return rc;
	rc = sim_event_lookup(sim, hev, &ev);
	if (!rc)
		rc = sim_capture_legacy_check(sim, s);
	if (rc)
		goto out;
	rc = sim_capture_event_wait(sim, s, ev, flags);
	if (rc != SIM_NOT_CAPTURING)
		goto out;
	rc = CUDA_SUCCESS;
	/* Nothing recorded, or already reached. A record still pending on
	 * this device needs the command too: its stream may be parked. */
	if (ev->done >= ev->gen)
		goto out;
	cmd = sim_cmd_new(SIM_CMD_WAIT);
	if (!cmd) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	cmd->event.ev = ev;
	cmd->event.gen = ev->gen;
	sim_cmd_submit(sim, s, cmd);
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuStreamGetFlags(CUstream h, unsigned int *flags)
{
	struct sim_stream *s;
	struct sim *sim;
	CUresult rc;

	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter_stream(h, &sim, &s);
	if (rc)
		return rc;
	*flags = s->flags;
	sim_leave(sim);
	return CUDA_SUCCESS;
}

CUresult sim_cuStreamGetPriority(CUstream h, int *priority)
{
	struct sim_stream *s;
	struct sim *sim;
	CUresult rc;

	if (!priority)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter_stream(h, &sim, &s);
	if (rc)
		return rc;
	*priority = s->priority;
	sim_leave(sim);
	return CUDA_SUCCESS;
}

CUresult sim_cuEventCreate(CUevent *ph, unsigned int flags)
{
	const unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING |
			       CU_EVENT_INTERPROCESS;
	struct sim_event *ev;
	struct sim_ctx *ctx;
	struct sim *sim;
	CUresult rc;

	if (!ph || flags & ~known)
		return CUDA_ERROR_INVALID_VALUE;
	/* Interprocess events must also disable timing. */
	if (flags & CU_EVENT_INTERPROCESS && !(flags & CU_EVENT_DISABLE_TIMING))
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_ctx_require(sim, &ctx);
	if (rc)
		goto out;
	ev = calloc(1, sizeof(*ev));
	if (!ev) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	ev->ctx = ctx;
	ev->flags = flags;
	ev->next = sim->events;
	sim->events = ev;
	*ph = (CUevent)ev;
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuEventRecordWithFlags(CUevent hev, CUstream h, unsigned int flags)
{
	struct sim_stream *s;
	struct sim_event *ev;
	struct sim_cmd *cmd;
	struct sim *sim;
	CUresult rc;

	/* EXTERNAL only means something under stream capture, which the sim
	 * never is in; the driver accepts it outside capture. */
	if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter_stream(h, &sim, &s);
	if (rc)
		return rc;
	rc = sim_event_lookup(sim, hev, &ev);
	if (rc)
		goto out;
	if (ev->ctx != s->ctx) {
		rc = CUDA_ERROR_INVALID_HANDLE;
		goto out;
	}
	rc = sim_capture_legacy_check(sim, s);
	if (rc)
		goto out;
	rc = sim_capture_event_record(sim, s, ev, flags);
	if (rc != SIM_NOT_CAPTURING)
		goto out;
	rc = CUDA_SUCCESS;
	cmd = sim_cmd_new(SIM_CMD_EVENT);
	if (!cmd) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	cmd->event.ev = ev;
	cmd->event.gen = ++ev->gen;
	sim_cmd_submit(sim, s, cmd);
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuEventRecord(CUevent hev, CUstream h)
{
	return sim_cuEventRecordWithFlags(hev, h, CU_EVENT_RECORD_DEFAULT);
}

CUresult sim_cuEventQuery(CUevent hev)
{
	struct sim_event *ev;
	struct sim *sim;
	CUresult rc;

	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_event_lookup(sim, hev, &ev);
	if (!rc && ev->capture)
		rc = CUDA_ERROR_CAPTURED_EVENT;
	/* Never recorded counts as complete, as in the driver. */
	if (!rc && ev->done < ev->gen)
		rc = CUDA_ERROR_NOT_READY;
	sim_leave(sim);
	return rc;
}

CUresult sim_cuEventSynchronize(CUevent hev)
{
	struct sim_event *ev;
	struct sim *sim;
	uint64_t target;
	CUresult rc;

	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_event_lookup(sim, hev, &ev);
	if (!rc && ev->capture)
		rc = CUDA_ERROR_CAPTURED_EVENT;
	if (!rc) {
		target = ev->gen;
		/* The event cannot be freed meanwhile: a pending record holds it. */
		while (ev->done < target && ev->ctx->dev->thread_started)
			pthread_cond_wait(&sim->done, &sim->lock);
		rc = ev->ctx->sticky;
	}
	sim_leave(sim);
	return rc;
}

CUresult sim_cuEventElapsedTime(float *ms, CUevent hstart, CUevent hend)
{
	struct sim_event *a, *b;
	struct sim *sim;
	CUresult rc;

	if (!ms)
		return CUDA_ERROR_INVALID_VALUE;
	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_event_lookup(sim, hstart, &a);
	if (!rc)
		rc = sim_event_lookup(sim, hend, &b);
	if (!rc && (a->capture || b->capture))
		rc = CUDA_ERROR_CAPTURED_EVENT;
	if (rc)
		goto out;
	/* The driver's order of checks: timing disabled or never recorded is
	 * an invalid handle; recorded but not reached is not ready. */
	if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING || !a->gen || !b->gen)
		rc = CUDA_ERROR_INVALID_HANDLE;
	else if (a->done < a->gen || b->done < b->gen)
		rc = CUDA_ERROR_NOT_READY;
	else
		*ms = (float)((double)((int64_t)(b->time_ns - a->time_ns)) / 1e6);
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuEventDestroy(CUevent hev)
{
	struct sim_event *ev;
	struct sim *sim;
	CUresult rc;

	rc = sim_enter(&sim);
	if (rc)
		return rc;
	rc = sim_event_lookup(sim, hev, &ev);
	if (!rc) {
		/* A pending record (or a graph node) still uses it; it goes after. */
		sim_event_unlink(sim, ev);
		sim_event_capture_clear(ev);
		if (ev->pending)
			ev->destroyed = true;
		else
			free(ev);
	}
	sim_leave(sim);
	return rc;
}

/* A host function or stream callback queued on @h (or captured). */
static CUresult sim_host_enqueue(CUstream h, CUhostFn fn, CUstreamCallback cb, void *data)
{
	struct sim_stream *s;
	struct sim_cmd *cmd;
	struct sim *sim;
	CUresult rc;

	rc = sim_enter_stream(h, &sim, &s);
	if (rc)
		return rc;
	rc = s->ctx->sticky;
	if (!rc)
		rc = sim_capture_legacy_check(sim, s);
	if (rc)
		goto out;
	cmd = sim_cmd_new(SIM_CMD_HOST);
	if (!cmd) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	cmd->host.fn = fn;
	cmd->host.cb = cb;
	cmd->host.hstream = h;
	cmd->host.data = data;
	rc = sim_stream_enqueue(sim, s, cmd);
out:
	sim_leave(sim);
	return rc;
}

CUresult sim_cuLaunchHostFunc(CUstream h, CUhostFn fn, void *data)
{
	if (!fn)
		return CUDA_ERROR_INVALID_VALUE;
	return sim_host_enqueue(h, fn, NULL, data);
}

CUresult sim_cuStreamAddCallback(CUstream h, CUstreamCallback cb, void *data, unsigned int flags)
{
	if (!cb || flags)
		return CUDA_ERROR_INVALID_VALUE;
	return sim_host_enqueue(h, NULL, cb, data);

}

/* Events shared between processes need state both processes see; the sim's
 * events live in one process's memory, so it answers as a driver without
 * interprocess events would (docs/limits.md). */
CUresult sim_cuIpcGetEventHandle(CUipcEventHandle *handle, CUevent event)
{
	(void)handle;
	(void)event;
	return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult sim_cuIpcOpenEventHandle(CUevent *event, CUipcEventHandle handle)
{
	(void)event;
	(void)handle;
	return CUDA_ERROR_NOT_SUPPORTED;
}
