/* An answer the shim keeps in the guest so that asking again costs no
 * round trip: one way of finding, asking and keeping it, shared by the
 * function answers (func_table.c) and the lookups (lookup_table.c). */
#include "shim.h"

CUresult shim_cache_answer(const struct shim_cache_answer_ops *ops, const uint64_t *gen, void *call)
{
	struct shim_process *p = shim_process();
	uint64_t asked_gen;
	CUresult res;

	pthread_mutex_lock(&p->cache.lock);
	/* A lost session fails every call: the cache must not hide that. */
	if (!rpc_session_lost() && ops->find_locked(p, call)) {
		pthread_mutex_unlock(&p->cache.lock);
		return CUDA_SUCCESS;
	}
	asked_gen = *gen;
	pthread_mutex_unlock(&p->cache.lock);
	/* Without the lock: a round trip must not stall every other answer. */
	res = ops->ask(call);
	if (res != CUDA_SUCCESS)
		return res;
	pthread_mutex_lock(&p->cache.lock);
	if (ops->learned_locked)
		ops->learned_locked(p, call);
	/* An unload, a set or a reconnect while it was asked may have changed
	 * the answer: only one asked since the last forget is kept. */
	if (*gen == asked_gen)
		ops->remember_locked(p, call);
	pthread_mutex_unlock(&p->cache.lock);
	return CUDA_SUCCESS;
}
