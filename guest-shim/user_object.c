/* User objects (cuUserObjectCreate ...) and the references graphs hold.
 *
 * A user object is the application's pointer and destructor with a
 * reference count. Nothing of it has to reach the device: the driver only
 * counts references and calls the destructor when the last one goes, and
 * the destructor must run in the application's process. So the shim keeps
 * user objects entirely in the guest, and the worker never sees them. The
 * graph calls (graph.c) tell this file when a graph is cloned, embedded in a
 * child node, instantiated, updated into an executable or destroyed.
 *
 * As in the driver, a destructor runs on a thread of the library's own (not
 * inside the call that dropped the last reference) and must not call CUDA.
 * An executable graph's references are dropped only once its launches are
 * done: cuGraphExecDestroy synchronises the context first when it holds any.
 *
 * Nothing is journaled: the objects live in the guest process, which a
 * restore of its worker does not touch.
 *
 * Locking: shim_process.cache_lock guards both lists. */
#define LOG_PREFIX "shim: "

#include "shim.h"

#include <stdlib.h>

#include "log.h"

struct shim_uobj {
	struct shim_uobj *next;
	void *ptr;
	CUhostFn destroy;
	uint64_t refs;
};

struct shim_uobj_ref {
	struct shim_uobj_ref *next;
	uint64_t owner;             /* graph or executable graph handle */
	uint32_t node;              /* child graph node that holds it, or NONE */
	struct shim_uobj *obj;
	uint64_t count;
};

/* A cap on one call's count keeps the sums below 2^63. */
#define UOBJ_COUNT_MAX (1u << 30)

static struct shim_uobj *uobj_find_locked(struct shim_process *p, CUuserObject h)
{
	for (struct shim_uobj *o = p->cache.uobjs; o; o = o->next)
		if ((CUuserObject)o == h)
			return o;
	return NULL;
}

static void *uobj_destroy_thread(void *arg)
{
	struct shim_uobj *o = arg;

	o->destroy(o->ptr);
	free(o);
	return NULL;
}

/* Drop @n references; the last one unlinks the object and runs its
 * destructor on a thread of its own (the driver's threads do that too). */
static struct shim_uobj *uobj_put_locked(struct shim_process *p, struct shim_uobj *o, uint64_t n)
{
	o->refs -= n;
	if (o->refs)
		return NULL;
	for (struct shim_uobj **pp = &p->cache.uobjs; *pp; pp = &(*pp)->next)
		if (*pp == o) {
			*pp = o->next;
			break;
		}
	return o;
}

/* Outside the lock: the destructor may take the application's locks. */
static void uobj_finish(struct shim_uobj *o)
{
	pthread_attr_t attr;
	pthread_t t;

	if (!o)
		return;
	if (!o->destroy) {
		free(o);
		return;
	}
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, uobj_destroy_thread, o)) {
		pr_warn("no thread for a user object's destructor: running it in the caller");
		uobj_destroy_thread(o);
	}
	pthread_attr_destroy(&attr);
}

SHIM_API CUresult cuUserObjectCreate(CUuserObject *object_out, void *ptr, CUhostFn destroy,
				     unsigned int initialRefcount, unsigned int flags)
{
	SHIM_ENTRY();
	struct shim_process *p = shim_process();
	struct shim_uobj *o;

	if (!object_out || !destroy || !initialRefcount || initialRefcount > UOBJ_COUNT_MAX ||
	    flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
		return CUDA_ERROR_INVALID_VALUE;
	o = calloc(1, sizeof(*o));
	if (!o)
		return CUDA_ERROR_OUT_OF_MEMORY;
	o->ptr = ptr;
	o->destroy = destroy;
	o->refs = initialRefcount;
	pthread_mutex_lock(&p->cache.lock);
	o->next = p->cache.uobjs;
	p->cache.uobjs = o;
	pthread_mutex_unlock(&p->cache.lock);
	*object_out = (CUuserObject)o;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuUserObjectRetain(CUuserObject object, unsigned int count)
{
	SHIM_ENTRY();
	struct shim_process *p = shim_process();
	struct shim_uobj *o;

	if (!count || count > UOBJ_COUNT_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&p->cache.lock);
	o = uobj_find_locked(p, object);
	if (o)
		o->refs += count;
	pthread_mutex_unlock(&p->cache.lock);
	return o ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SHIM_API CUresult cuUserObjectRelease(CUuserObject object, unsigned int count)
{
	SHIM_ENTRY();
	struct shim_process *p = shim_process();
	struct shim_uobj *o, *dead = NULL;
	CUresult res = CUDA_SUCCESS;

	if (!count || count > UOBJ_COUNT_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&p->cache.lock);
	o = uobj_find_locked(p, object);
	/* Releasing references the caller does not own is undefined in the
	 * driver; here it is refused rather than free an object a graph holds. */
	if (!o || o->refs < count)
		res = CUDA_ERROR_INVALID_VALUE;
	else
		dead = uobj_put_locked(p, o, count);
	pthread_mutex_unlock(&p->cache.lock);
	uobj_finish(dead);
	return res;
}

static bool graph_ok(CUgraph g)
{
	return handle_kind_is((uint64_t)(uintptr_t)g, WIRE_HANDLE_GRAPH);
}

static struct shim_uobj_ref *ref_find_locked(struct shim_process *p, uint64_t owner, uint32_t node,
					     struct shim_uobj *o)
{
	for (struct shim_uobj_ref *r = p->cache.uobj_refs; r; r = r->next)
		if (r->owner == owner && r->node == node && r->obj == o)
			return r;
	return NULL;
}

static int ref_add_locked(struct shim_process *p, uint64_t owner, uint32_t node, struct shim_uobj *o,
			  uint64_t count)
{
	struct shim_uobj_ref *r = ref_find_locked(p, owner, node, o);

	if (!r) {
		r = calloc(1, sizeof(*r));
		if (!r)
			return -1;
		r->owner = owner;
		r->node = node;
		r->obj = o;
		r->next = p->cache.uobj_refs;
		p->cache.uobj_refs = r;
	}
	r->count += count;
	return 0;
}

SHIM_API CUresult cuGraphRetainUserObject(CUgraph graph, CUuserObject object, unsigned int count,
					  unsigned int flags)
{
	SHIM_ENTRY();
	struct shim_process *p = shim_process();
	struct shim_uobj *o;
	CUresult res = CUDA_SUCCESS;

	if (!graph_ok(graph) || !count || count > UOBJ_COUNT_MAX || (flags & ~CU_GRAPH_USER_OBJECT_MOVE))
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&p->cache.lock);
	o = uobj_find_locked(p, object);
	if (!o || ((flags & CU_GRAPH_USER_OBJECT_MOVE) && o->refs < count))
		res = CUDA_ERROR_INVALID_VALUE;
	else if (ref_add_locked(p, (uint64_t)(uintptr_t)graph, SHIM_UOBJ_NODE_NONE, o, count))
		res = CUDA_ERROR_OUT_OF_MEMORY;
	/* A move hands over the caller's references: the count stays. */
	else if (!(flags & CU_GRAPH_USER_OBJECT_MOVE))
		o->refs += count;
	pthread_mutex_unlock(&p->cache.lock);
	return res;
}

/* Unlink @r and give back its references; the object, if that was its last. */
static struct shim_uobj *ref_drop_locked(struct shim_process *p, struct shim_uobj_ref **pr, uint64_t n)
{
	struct shim_uobj_ref *r = *pr;
	struct shim_uobj *o = r->obj;

	r->count -= n;
	if (!r->count) {
		*pr = r->next;
		free(r);
	}
	return uobj_put_locked(p, o, n);
}

SHIM_API CUresult cuGraphReleaseUserObject(CUgraph graph, CUuserObject object, unsigned int count)
{
	SHIM_ENTRY();
	struct shim_process *p = shim_process();
	struct shim_uobj *o, *dead = NULL;
	CUresult res = CUDA_ERROR_INVALID_VALUE;

	if (!graph_ok(graph) || !count || count > UOBJ_COUNT_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&p->cache.lock);
	o = uobj_find_locked(p, object);
	for (struct shim_uobj_ref **pr = &p->cache.uobj_refs; o && *pr; pr = &(*pr)->next) {
		struct shim_uobj_ref *r = *pr;

		/* Only the graph's own references, not its child nodes'. */
		if (r->owner == (uint64_t)(uintptr_t)graph && r->node == SHIM_UOBJ_NODE_NONE && r->obj == o) {
			if (r->count >= count) {
				dead = ref_drop_locked(p, pr, count);
				res = CUDA_SUCCESS;
			}
			break;
		}
	}
	pthread_mutex_unlock(&p->cache.lock);
	uobj_finish(dead);
	return res;
}

/* Drop the references @owner holds (through @node, or all when @all). */
static void owner_drop(uint64_t owner, uint32_t node, bool all)
{
	struct shim_process *p = shim_process();
	struct shim_uobj *dead[64];
	unsigned n;

	do {
		n = 0;
		pthread_mutex_lock(&p->cache.lock);
		for (struct shim_uobj_ref **pr = &p->cache.uobj_refs; *pr && n < 64;) {
			struct shim_uobj_ref *r = *pr;
			struct shim_uobj *d;

			if (r->owner != owner || (!all && r->node != node)) {
				pr = &r->next;
				continue;
			}
			d = ref_drop_locked(p, pr, r->count);
			if (d)
				dead[n++] = d;
		}
		pthread_mutex_unlock(&p->cache.lock);
		for (unsigned i = 0; i < n; i++)
			uobj_finish(dead[i]);
	} while (n == 64);
}

void uobj_owner_drop(uint64_t owner)
{
	owner_drop(owner, 0, true);
}

void uobj_owner_drop_node(uint64_t owner, uint32_t node)
{
	owner_drop(owner, node, false);
}

void uobj_owner_copy(uint64_t from, uint64_t to, uint32_t node, bool retag)
{
	struct shim_process *p = shim_process();

	pthread_mutex_lock(&p->cache.lock);
	for (struct shim_uobj_ref *r = p->cache.uobj_refs; r; r = r->next) {
		if (r->owner != from)
			continue;
		/* New entries go to the list's head: this walk never meets them. */
		if (ref_add_locked(p, to, retag ? node : r->node, r->obj, r->count)) {
			pr_err("out of memory: a graph's user object references were not copied");
			break;
		}
		r->obj->refs += r->count;
	}
	pthread_mutex_unlock(&p->cache.lock);
}

bool uobj_owner_holds(uint64_t owner)
{
	struct shim_process *p = shim_process();
	bool held = false;

	pthread_mutex_lock(&p->cache.lock);
	for (struct shim_uobj_ref *r = p->cache.uobj_refs; r && !held; r = r->next)
		held = r->owner == owner;
	pthread_mutex_unlock(&p->cache.lock);
	return held;
}

/* After fork: the child's graphs are a new session's; the parent's objects
 * stay the parent's (their destructors run there). Called with cache_lock held. */
void uobj_reset(struct shim_process *p)
{
	while (p->cache.uobj_refs) {
		struct shim_uobj_ref *r = p->cache.uobj_refs;

		p->cache.uobj_refs = r->next;
		free(r);
	}
	while (p->cache.uobjs) {
		struct shim_uobj *o = p->cache.uobjs;

		p->cache.uobjs = o->next;
		free(o);
	}
}
