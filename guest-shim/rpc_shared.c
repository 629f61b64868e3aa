#define LOG_PREFIX "shim: "

/* A connection's shared-memory paths (rpc_internal.h): rings on a memfd
 * (shm_attach), rings in the domain's ivshmem slot (ivshmem_attach), and the
 * pinned buffers handed over again to a new worker. */
#include "shim.h"
#include "rpc_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fdpass.h"
#include "log.h"
#include "wire.h"

/* TERN_SHM_RING: the rings' size (0: @dflt); TERN_SHM_SPIN_US: how long a
 * side spins before it sleeps. For both kinds of rings. */
static uint64_t shm_ring_env(uint64_t dflt)
{
	const char *ring = getenv("TERN_SHM_RING");

	return ring && *ring ? strtoull(ring, NULL, 0) : dflt;
}

static void shm_spin_env(struct shm_chan *c)
{
	const char *spin = getenv("TERN_SHM_SPIN_US");

	if (spin && *spin)
		c->spin_ns = strtoull(spin, NULL, 0) * 1000;
}

/* Move the open connection onto shared-memory rings: the request that names
 * their layout, then the memfd and eventfds on the socket. -EOPNOTSUPP when
 * they cannot be made here or the worker did not take them (a peer that
 * cannot receive descriptors: the worker answers once it sees none): the
 * socket then carries the session on, as it was. Any other error leaves the
 * connection unusable. */
int shm_upgrade_locked(struct shim_process *p)
{
	struct wire_shm_attach_req req = { .ring_bytes = shm_ring_env(SHM_RING_DEFAULT) };
	struct wire_header h = { .call = WIRE_CALL_SHM_ATTACH };
	struct iovec iov[WIRE_MSG_IOV_MAX];
	struct wire_cursor cur;
	struct wire_msg m;
	CUresult status = CUDA_ERROR_UNKNOWN;
	int fds[SHM_CHAN_FDS], niov, ret, fds_ret;

	ret = shm_chan_create(&p->conn.shm, req.ring_bytes, p->conn.fd);
	if (ret) {
		pr_info("no shared-memory rings (%s)", strerror(-ret));
		return -EOPNOTSUPP;
	}
	shm_spin_env(&p->conn.shm);
	/* The request, then the descriptors: the worker reads exactly the
	 * request from the stream before it takes them. */
	wire_msg_init(&m);
	wire_shm_attach_req_encode(&m, &req);
	niov = wire_msg_finish(&m, &h, iov);
	ret = niov < 0 ? niov : wire_send(p->conn.fd, iov, niov);
	wire_msg_release(&m);
	if (ret)
		goto fail;
	shm_chan_fds(&p->conn.shm, fds);
	/* Refused descriptors: the worker still answers the request. */
	fds_ret = shm_fds_send(p->conn.fd, fds, SHM_CHAN_FDS);
	/* The worker holds the memfd now; our mapping keeps the pages. */
	close(p->conn.shm.memfd);
	p->conn.shm.memfd = -1;
	ret = reply_read_locked(p, WIRE_CALL_SHM_ATTACH, 0, &cur, &status);
	if (ret)
		goto fail;
	if (fds_ret || status != CUDA_SUCCESS) {
		pr_info("ternd did not take the shared-memory rings (%s, CUresult %d)",
			fds_ret ? strerror(-fds_ret) : "refused", status);
		ret = -EOPNOTSUPP;
		goto fail;
	}
	p->conn.shm_on = true;
	return 0;
fail:
	shm_chan_close(&p->conn.shm);
	return ret;
}

/* Whether a pinned buffer lives in the ivshmem slot. */
static bool host_bar_buffers_locked(struct shim_process *p)
{
	bool any = false;

	pthread_mutex_lock(&p->cache.lock);
	for (struct shim_host_range *r = p->cache.host_ranges; r && !any; r = r->next)
		any = r->in_bar;
	pthread_mutex_unlock(&p->cache.lock);
	return any;
}

/* The domain's ivshmem BAR, when this process should use one: TERN_IVSHMEM
 * names the file to map ("off" or "0": none), else a virtio: transport looks
 * for the ivshmem-plain device on the PCI bus. Looked for once. */
bool ivshmem_wanted(struct shim_process *p, const struct transport_url *url)
{
	const char *env = getenv("TERN_IVSHMEM");
	int ret;

	if (p->ivshmem.bar_tried)
		return p->ivshmem.bar.base != NULL;
	p->ivshmem.bar_tried = true;
	if (env && (!strcmp(env, "off") || !strcmp(env, "0")))
		return false;
	if ((!env || !*env) && url->kind != TRANSPORT_VIRTIO)
		return false;
	ret = ivshmem_guest_open(&p->ivshmem.bar, env && *env ? env : NULL);
	if (ret && (env && *env))
		pr_warn("TERN_IVSHMEM %s: %s: bulk data goes through the stream", env, strerror(-ret));
	else if (!ret)
		pr_info("ivshmem BAR %s: %llu bytes", p->ivshmem.bar.path, (unsigned long long)p->ivshmem.bar.bytes);
	return !ret;
}

/* Move the open connection onto rings in the slot of the BAR that the worker
 * assigns. -EOPNOTSUPP when the worker has no BAR for us (not a domain's
 * session, no <shmem> for the domain, every slot taken): the stream goes on
 * carrying everything. Any other error leaves the connection unusable (the
 * worker may be on the rings already) and gives up on the BAR for this
 * process: a BAR that is not the host's (its header does not name the slot)
 * would fail every time. */
int ivshmem_upgrade_locked(struct shim_process *p)
{
	struct wire_ivshmem_attach_req req = { .ring_bytes = shm_ring_env(0), .want_slot = IVSHMEM_SLOT_ANY };
	struct wire_ivshmem_attach_rep rep;
	struct wire_header h = { .call = WIRE_CALL_IVSHMEM_ATTACH };
	struct iovec iov[WIRE_MSG_IOV_MAX];
	struct wire_cursor cur;
	struct wire_msg m;
	CUresult status = CUDA_ERROR_UNKNOWN;
	void *area;
	int niov, ret;

	/* Pinned buffers in the slot: the same slot again, or none. */
	if (p->ivshmem.slot_base)
		req.want_slot = p->ivshmem.slot;
	wire_msg_init(&m);
	wire_ivshmem_attach_req_encode(&m, &req);
	niov = wire_msg_finish(&m, &h, iov);
	ret = niov < 0 ? niov : wire_send(p->conn.fd, iov, niov);
	wire_msg_release(&m);
	if (!ret)
		ret = reply_read_locked(p, WIRE_CALL_IVSHMEM_ATTACH, 0, &cur, &status);
	if (ret)
		return ret;
	if (status != CUDA_SUCCESS) {
		pr_info("no ivshmem slot from ternd (CUresult %d): bulk data goes through the stream", status);
		return -EOPNOTSUPP;
	}
	if (wire_ivshmem_attach_rep_decode(&cur, &rep) < 0)
		ret = -EPROTO;
	area = ret ? NULL : ivshmem_guest_slot(&p->ivshmem.bar, rep.slot, rep.offset, rep.bytes, rep.ring_bytes);
	if (!ret && !area) {
		pr_err("ivshmem: slot %u (%#llx+%#llx) is not in %s as ternd describes it: is it the domain's BAR?",
		       rep.slot, (unsigned long long)rep.offset, (unsigned long long)rep.bytes, p->ivshmem.bar.path);
		ret = -EPROTO;
	}
	if (!ret && p->ivshmem.slot_base && area != p->ivshmem.slot_base && host_bar_buffers_locked(p)) {
		pr_err("ivshmem: ternd assigned slot %u, the pinned buffers are in slot %u", rep.slot, p->ivshmem.slot);
		return -EBUSY;
	}
	if (!ret)
		ret = shm_chan_region_guest(&p->conn.shm, area, rep.ring_bytes, p->conn.fd);
	if (ret) {
		if (!p->ivshmem.slot_base)
			ivshmem_guest_close(&p->ivshmem.bar);
		return ret;
	}
	p->ivshmem.slot = rep.slot;
	p->ivshmem.slot_base = area;
	p->ivshmem.slot_bytes = rep.bytes;
	p->ivshmem.slot_carve = SHM_CHAN_BYTES(rep.ring_bytes);
	shm_spin_env(&p->conn.shm);
	p->conn.shm_on = true;
	p->conn.ivshmem_on = true;
	pr_info("session %s on ivshmem slot %u (rings of %llu bytes)", p->who.session, rep.slot,
		(unsigned long long)rep.ring_bytes);
	return 0;
}

/* A new worker (after a restore) lacks the guest's shared host buffers: hand
 * them over again, outside the request sequence, before anything is replayed. */
int host_shared_reshare_locked(struct shim_process *p)
{
	struct shim_host_range *r, *shared = NULL;
	unsigned n = 0, i;
	int ret = 0;

	/* Copied out first: no round trip under cache_lock. */
	pthread_mutex_lock(&p->cache.lock);
	for (r = p->cache.host_ranges; r; r = r->next)
		n += r->memfd >= 0 || (r->in_bar && p->conn.ivshmem_on);
	if (n)
		shared = calloc(n, sizeof(*shared));
	for (r = p->cache.host_ranges, i = 0; r && shared; r = r->next) {
		if (r->memfd >= 0 || (r->in_bar && p->conn.ivshmem_on))
			shared[i++] = *r;
	}
	pthread_mutex_unlock(&p->cache.lock);
	if (n && !shared)
		return -ENOMEM;
	for (i = 0; i < n && !ret; i++) {
		struct wire_mem_host_share_req req = {
			.address = shared[i].base, .bytes = shared[i].size, .flags = shared[i].flags,
		};
		struct iovec iov[WIRE_MSG_IOV_MAX];
		struct wire_cursor cur;
		struct wire_msg m;
		CUresult status = CUDA_ERROR_UNKNOWN;
		int niov;

		wire_msg_init(&m);
		if (shared[i].in_bar) {
			struct wire_ivshmem_host_share_req bar = {
				.address = shared[i].base, .offset = shared[i].bar_offset, .bytes = shared[i].size,
				.flags = shared[i].flags,
			};

			wire_ivshmem_host_share_req_encode(&m, &bar);
			ret = conn_exchange_locked(p, WIRE_CALL_IVSHMEM_HOST_SHARE, 0, &m, iov, &niov, &cur, &status);
		} else {
			ret = shm_fds_send(p->conn.fd, &shared[i].memfd, 1);
			wire_mem_host_share_req_encode(&m, &req);
			if (!ret)
				ret = conn_exchange_locked(p, WIRE_CALL_MEM_HOST_SHARE, 0, &m, iov, &niov, &cur,
							   &status);
		}
		wire_msg_release(&m);
		if (!ret && status != CUDA_SUCCESS) {
			pr_err("pinned buffer %#lx (%zu bytes) cannot be shared with the new worker: %d",
			       (unsigned long)shared[i].base, shared[i].size, status);
			ret = -EIO;
		}
	}
	free(shared);
	return ret;
}

/* TERN_SHM_STAGING: the slots' bytes (0: none; rounded down to whole pages
 * per slot); TERN_SHM_STAGING_SLOTS: how many (2 to 64). */
#define STAGING_BYTES_DEFAULT (32ull << 20)
#define STAGING_BYTES_MAX (1ull << 30)
#define STAGING_SLOTS_DEFAULT 4u

static int staging_make(struct shim_staging *st)
{
	const char *env = getenv("TERN_SHM_STAGING");
	const char *env_slots = getenv("TERN_SHM_STAGING_SLOTS");
	uint64_t bytes = env && *env ? strtoull(env, NULL, 0) : STAGING_BYTES_DEFAULT;
	unsigned long slots = env_slots && *env_slots ? strtoul(env_slots, NULL, 0) : STAGING_SLOTS_DEFAULT;
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	void *map;
	int fd;

	if (slots < 2 || slots > SHIM_STAGING_SLOTS_MAX) {
		pr_warn("TERN_SHM_STAGING_SLOTS=%s: not 2 to %u, %u taken", env_slots, SHIM_STAGING_SLOTS_MAX,
			STAGING_SLOTS_DEFAULT);
		slots = STAGING_SLOTS_DEFAULT;
	}
	if (bytes > STAGING_BYTES_MAX)
		bytes = STAGING_BYTES_MAX;
	st->slots = (uint32_t)slots;
	st->slot_bytes = bytes / st->slots / page * page;
	if (st->slot_bytes < (64u << 10))
		return -ENOTSUP;        /* off, or too small to be worth it */
	st->bytes = st->slot_bytes * st->slots;
	st->header_bytes = (sizeof(struct wire_staging_header) + page - 1) / page * page;
	st->map_bytes = st->header_bytes + st->bytes;
	fd = shm_memfd_create("tern-staging", st->map_bytes);
	if (fd < 0)
		return fd;
	map = mmap(NULL, st->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		close(fd);
		return -errno;
	}
	staging_copier_init(&st->copier);
	st->memfd = fd;
	st->map = map;
	st->header = map;
	st->base = st->map + st->header_bytes;
	return 0;
}

int staging_attach_locked(struct shim_process *p)
{
	struct shim_staging *st = &p->staging;
	struct wire_staging_attach_tickets_req req;
	struct iovec iov[WIRE_MSG_IOV_MAX];
	struct wire_cursor cur;
	struct wire_msg m;
	CUresult status = CUDA_ERROR_UNKNOWN;
	int niov, ret;

	if (st->memfd < 0) {
		ret = staging_make(st);
		if (ret)
			return ret;
	}
	req = (struct wire_staging_attach_tickets_req){
		.header_bytes = st->header_bytes, .bytes = st->bytes, .slots = st->slots,
	};
	/* The memfd first, then the request, as for a pinned buffer. */
	ret = shm_fds_send(p->conn.fd, &st->memfd, 1);
	if (ret)
		return ret;
	wire_msg_init(&m);
	wire_staging_attach_tickets_req_encode(&m, &req);
	ret = conn_exchange_locked(p, WIRE_CALL_STAGING_ATTACH_TICKETS, 0, &m, iov, &niov, &cur, &status);
	wire_msg_release(&m);
	if (!ret && status != CUDA_SUCCESS) {
		pr_warn("ternd refused the staging of pageable copies: CUresult %d", status);
		ret = -EIO;
	}
	if (!ret)
		st->attached = true;
	return ret;
}
