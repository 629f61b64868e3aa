/* What rpc.c and rpc_shared.c share: one connection's exchanges and its
 * shared-memory paths.  Everything here runs under shim_process's
 * conn_lock (the _locked suffix), outside the request sequence (seq 0)
 * unless a caller gives one. */
#ifndef TERN_SHIM_RPC_INTERNAL_H
#define TERN_SHIM_RPC_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "shim.h"
#include "transport.h"

/* Read the reply to call @id under @seq: 0 with its payload at *rep and
 * its CUresult in *status, or -errno. */
int reply_read_locked(struct shim_process *p, uint32_t id, uint64_t seq,
		      struct wire_cursor *rep, CUresult *status);
/* One request/reply exchange under sequence number @seq. The reply payload
 * lands in the thread's buffer; *@status is its CUresult. Returns 0 or
 * -errno for a transport or framing failure, -EMSGSIZE for a request too
 * large to send (the connection stays up). */
int conn_exchange_locked(struct shim_process *p, uint32_t id, uint64_t seq, struct wire_msg *req,
			 struct iovec *iov, int *niov, struct wire_cursor *rep, CUresult *status);

/* rpc_shared.c */
/* Move the open connection onto rings on a memfd. 0, -EOPNOTSUPP when
 * the socket goes on carrying everything, or -errno. */
int shm_upgrade_locked(struct shim_process *p);
/* Whether this process has the domain's ivshmem BAR (looked for once). */
bool ivshmem_wanted(struct shim_process *p, const struct transport_url *url);
/* Move the open connection onto rings in the BAR's slot; -EOPNOTSUPP when
 * the worker has none for us (the stream carries everything). */
int ivshmem_upgrade_locked(struct shim_process *p);
/* Hand the staging of pageable copies to this connection's worker, made
 * first if the process has none (TERN_SHM_STAGING bytes). 0 or -errno. */
int staging_attach_locked(struct shim_process *p);
/* Hand the guest's shared pinned buffers to a new worker. 0 or -errno. */
int host_shared_reshare_locked(struct shim_process *p);

#endif
