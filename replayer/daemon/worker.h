/* A session worker: the process ternd forks for each session.
 *
 * It is forked only for a hello the supervisor has read and checked
 * (preauth.h): it takes that hello, opens the backend (the CUDA driver must
 * be loaded after fork, never before), and then serves requests on the
 * connection one at a time until the guest leaves. A guest can make its own
 * requests fail, never the worker exit, except by closing the connection or
 * breaking the framing.
 */
#ifndef TERN_WORKER_H
#define TERN_WORKER_H

#include "backend.h"
#include "cl_exec.h"
#include "control_msg.h"
#include "exec.h"
#include "session_slot.h"
#include "tls.h"

struct worker_config {
	const char *backend;            /* "cuda" or "sim" */
	struct backend_config backend_cfg;
	struct exec_config exec_cfg;
	struct cl_exec_config opencl;   /* the host's OpenCL platform (docs/opencl.md) */
	/* The hello the supervisor read and checked, and what it decided: the
	 * session credential (AUTH_CREDENTIAL_BYTES) as snapshots keep it and
	 * as the hello reply carries it, and the unix uid that owns the session. */
	const struct wire_header *hello_header;
	const uint8_t *hello_payload;
	const uint8_t *credential;
	const uint8_t *credential_wire;
	/* A tls:// connection's TLS session, the supervisor's copied by the
	 * fork: the worker's to use and close. NULL: plaintext. */
	struct tls_conn *tls;
	struct tls_creds *tls_creds;    /* with tls: the listener's certificates */
	bool has_owner_uid;
	uint32_t owner_uid;
	const char *state_dir;          /* journals and the snapshot store live here */
	const char *session_id;         /* as the supervisor named it ("UUID/id" for a domain's); NULL: the hello's, cleaned */
	const char *ivshmem_dir;        /* domains' BAR files DIR/tern-UUID (ivshmem_bar.h); NULL: none */
	uint64_t ivshmem_slot_bytes;    /* the slot each session takes of its domain's BAR */
	int cmd_fd;                     /* line channel to the supervisor */
	int ipc_fd;                     /* IPC requests to the supervisor (ipc_broker.h); -1: none */
};

/* The supervisor <-> worker channel (a socketpair): one struct control_link
 * per line, both ways (common/control_msg.h lists the messages). */
#define WORKER_LINE_MAX CONTROL_LINK_MAX

/* In the forked worker: SIGTERM and SIGINT end the session cleanly between
 * two requests (the supervisor's shutdown sends SIGTERM, then SIGKILL after
 * a grace period). */
void worker_signals_install(void);

/* Session ids name files and appear in status output: @out (SESSION_ID_MAX
 * bytes) is @id with every other byte than A-Z a-z 0-9 - . _ made '_'. */
void worker_session_id_clean(char *out, const char *id);

/* Serve the session on @fd; returns the process exit status. */
int worker_run(const struct worker_config *cfg, int fd, struct session_slot *slot);

/* A live migration's prepared worker (docs/migration.md), forked before
 * its guest comes: the backend opens on @cfg's device at once, each round
 * the supervisor names (CONTROL_LINK_PREFILL) is filled into device memory,
 * and the guest's connection and hello come with CONTROL_LINK_ADOPT, after
 * which it is a worker as worker_run's. @cfg->session_id names the session;
 * its hello and credentials come with the adoption. Returns the process
 * exit status. */
int worker_standby_run(const struct worker_config *cfg, struct session_slot *slot);

#endif
