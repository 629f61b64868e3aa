/* Lookups whose answer the driver keeps fixed while their owner lives:
 * a library's kernel by name (the same CUkernel every time), the library
 * a kernel came from, a library's module in a context and a module's
 * function by name. The first successful answer is remembered; an error
 * is always asked again, so a bad handle or name gets the driver's. */
#include "shim.h"

#include <stdlib.h>
#include <string.h>

struct shim_lookup {
	uint32_t kind;                  /* enum lookup_kind */
	uint64_t owner;                 /* the library, module or kernel asked about */
	uint64_t ctx;                   /* LOOKUP_MODULE: the context asked in; else 0 */
	uint64_t answer;
	struct shim_lookup *next;
	char name[];                    /* "" for the lookups without one */
};

static unsigned lookup_bucket(enum lookup_kind kind, uint64_t owner, uint64_t ctx, const char *name)
{
	uint64_t h = 0xcbf29ce484222325ull ^ kind;

	h = (h ^ owner) * 0x100000001b3ull;
	h = (h ^ ctx) * 0x100000001b3ull;
	for (const char *c = name; *c; c++)
		h = (h ^ (uint8_t)*c) * 0x100000001b3ull;
	return (unsigned)((h * 0x9e3779b97f4a7c15ull) >> 56) % SHIM_LOOKUP_BUCKETS;
}

static struct shim_lookup *lookup_find_locked(struct shim_process *p, enum lookup_kind kind,
					      uint64_t owner, uint64_t ctx, const char *name)
{
	for (struct shim_lookup *l = p->cache.lookups[lookup_bucket(kind, owner, ctx, name)]; l;
	     l = l->next)
		if (l->kind == kind && l->owner == owner && l->ctx == ctx && !strcmp(l->name, name))
			return l;
	return NULL;
}

/* Kept unless already there; an allocation that fails keeps nothing (the
 * next lookup asks). The caller checks that nothing was forgotten since the
 * answer was asked (lookups_gen). */
static void lookup_add_locked(struct shim_process *p, enum lookup_kind kind, uint64_t owner,
			      uint64_t ctx, const char *name, uint64_t answer)
{
	size_t len = strlen(name);
	unsigned b = lookup_bucket(kind, owner, ctx, name);
	struct shim_lookup *l;

	if (lookup_find_locked(p, kind, owner, ctx, name))
		return;
	l = malloc(sizeof(*l) + len + 1);
	if (!l)
		return;
	*l = (struct shim_lookup){ .kind = kind, .owner = owner, .ctx = ctx, .answer = answer };
	memcpy(l->name, name, len + 1);
	l->next = p->cache.lookups[b];
	p->cache.lookups[b] = l;
}

/* One lookup (lookup_table_answer), as shim_cache_answer keeps it. */
struct lookup_call {
	enum lookup_kind kind;
	uint64_t owner, ctx;
	const char *name;               /* as asked: NULL for the kinds without one */
	const char *key;                /* as kept: "" for those */
	uint64_t *answer;
	CUresult (*ask)(uint64_t owner, const char *name, uint64_t *answer);
};

static bool lookup_call_find_locked(struct shim_process *p, void *call)
{
	const struct lookup_call *c = call;
	const struct shim_lookup *l = lookup_find_locked(p, c->kind, c->owner, c->ctx, c->key);

	if (l)
		*c->answer = l->answer;
	return l != NULL;
}

static CUresult lookup_call_ask(void *call)
{
	const struct lookup_call *c = call;

	return c->ask(c->owner, c->name, c->answer);
}

static void lookup_call_remember_locked(struct shim_process *p, void *call)
{
	const struct lookup_call *c = call;

	lookup_add_locked(p, c->kind, c->owner, c->ctx, c->key, *c->answer);
	/* A kernel found in a library came from it. */
	if (c->kind == LOOKUP_KERNEL)
		lookup_add_locked(p, LOOKUP_KERNEL_LIBRARY, *c->answer, 0, "", c->owner);
}

static const struct shim_cache_answer_ops lookup_answer = {
	.find_locked = lookup_call_find_locked,
	.ask = lookup_call_ask,
	.remember_locked = lookup_call_remember_locked,
};

CUresult lookup_table_answer(enum lookup_kind kind, uint64_t owner, const char *name,
			     uint64_t *answer,
			     CUresult (*ask)(uint64_t owner, const char *name, uint64_t *answer))
{
	uint64_t current = ctx_current();
	struct lookup_call call = {
		.kind = kind, .owner = owner, .ctx = kind == LOOKUP_MODULE ? current : 0,
		.name = name, .key = name ? name : "", .answer = answer, .ask = ask,
	};

	/* Modules live in contexts: without a current one the driver's answer
	 * is its own (an error, or another context's module). */
	if ((kind == LOOKUP_MODULE || kind == LOOKUP_FUNCTION) && !current)
		return ask(owner, name, answer);
	return shim_cache_answer(&lookup_answer, &shim_process()->cache.lookups_gen, &call);
}

uint64_t lookup_table_gen(void)
{
	struct shim_process *p = shim_process();
	uint64_t gen;

	pthread_mutex_lock(&p->cache.lock);
	gen = p->cache.lookups_gen;
	pthread_mutex_unlock(&p->cache.lock);
	return gen;
}

void lookup_table_kernels_listed(uint64_t library, const CUkernel *kernels, unsigned count,
				 uint64_t gen)
{
	struct shim_process *p = shim_process();

	pthread_mutex_lock(&p->cache.lock);
	/* Kept only if nothing was forgotten since @gen: the library may have
	 * been unloaded while it was listed. */
	for (unsigned i = 0; p->cache.lookups_gen == gen && i < count; i++)
		lookup_add_locked(p, LOOKUP_KERNEL_LIBRARY, (uint64_t)(uintptr_t)kernels[i], 0, "",
				  library);
	pthread_mutex_unlock(&p->cache.lock);
}

/* Drop every lookup @drop chooses; later answers of lookups asked before
 * are not kept. */
static void lookup_forget_locked(struct shim_process *p,
				 bool (*drop)(const struct shim_lookup *l, uint64_t arg), uint64_t arg)
{
	p->cache.lookups_gen++;
	for (unsigned b = 0; b < SHIM_LOOKUP_BUCKETS; b++) {
		struct shim_lookup **at = &p->cache.lookups[b];

		while (*at) {
			struct shim_lookup *l = *at;

			if (drop && !drop(l, arg)) {
				at = &l->next;
				continue;
			}
			*at = l->next;
			free(l);
		}
	}
}

static bool lookup_of_library(const struct shim_lookup *l, uint64_t library)
{
	if (l->kind == LOOKUP_KERNEL_LIBRARY)
		return l->answer == library;
	return (l->kind == LOOKUP_KERNEL || l->kind == LOOKUP_MODULE) && l->owner == library;
}

static bool lookup_of_context(const struct shim_lookup *l, uint64_t unused)
{
	(void)unused;
	return l->kind == LOOKUP_FUNCTION || l->kind == LOOKUP_MODULE;
}

void lookup_table_library_unloaded(uint64_t library)
{
	struct shim_process *p = shim_process();

	pthread_mutex_lock(&p->cache.lock);
	lookup_forget_locked(p, lookup_of_library, library);
	pthread_mutex_unlock(&p->cache.lock);
}

void lookup_table_forget_modules_locked(struct shim_process *p)
{
	lookup_forget_locked(p, lookup_of_context, 0);
}

void lookup_table_forget_all(void)
{
	struct shim_process *p = shim_process();

	pthread_mutex_lock(&p->cache.lock);
	lookup_forget_locked(p, NULL, 0);
	pthread_mutex_unlock(&p->cache.lock);
}

void lookup_table_reset(struct shim_process *p)
{
	lookup_forget_locked(p, NULL, 0);
}
