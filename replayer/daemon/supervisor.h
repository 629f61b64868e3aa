/* ternd's supervisor: listens, forks one worker per connection, answers the
 * control socket, reaps workers and shuts down cleanly on SIGTERM.
 *
 * Single-threaded: one poll loop over the listeners, the control socket and a
 * signalfd. Session slots live in a shared mapping created before any fork.
 */
#ifndef TERN_SUPERVISOR_H
#define TERN_SUPERVISOR_H

#include "auth.h"
#include "preauth.h"
#include "service_sockets.h"
#include "transport.h"
#include "worker.h"

#include <sys/types.h>

#define SUPERVISOR_LISTEN_MAX 8
#define SUPERVISOR_SIM_KERNELS_MAX 16
#define SUPERVISOR_SESSIONS_DEFAULT 1024
#define SUPERVISOR_SESSIONS_LIMIT 65536  /* = SNAP_SESSIONS_LIMIT, the sessions file's */
#define SUPERVISOR_VM_DIR_DEFAULT "/run/tern/vm"
#define SUPERVISOR_IVSHMEM_DIR_DEFAULT "/dev/shm"

struct supervisor_config {
	struct transport_url listen[SUPERVISOR_LISTEN_MAX];
	unsigned listen_count;
	struct transport_url migrate_listen;  /* --migrate-listen: migration streams in */
	bool migrate_listen_set;
	char migrate_advertise[256];          /* --migrate-advertise: where sources reach it, "" */
	char ckpt_path[4096];                 /* --ckpt: what runs a domain's migration out */
	char token_path[4096];                /* --token-file's path, for that ckpt */
	struct transport_url metrics_listen;  /* --metrics-listen: GET /metrics (metrics_http.h) */
	bool metrics_listen_set;
	bool metrics_public;                  /* its public: form: an address beyond loopback */
	char control_path[108];
	struct worker_config worker;
	struct auth_token token;    /* len 0: tcp listeners refuse every guest */
	struct tls_creds *tls;      /* tls:// listeners' certificate (--tls-cert ...), or NULL */
	struct preauth_config preauth;
	bool socket_group_set;      /* --socket-group: sockets and control peers of this group */
	gid_t socket_group;
	bool vm_socket_group_set;   /* --vm-socket-group: the domain sockets' group (QEMU's) alone */
	gid_t vm_socket_group;
	bool stop_suspends;         /* --on-stop suspend: SIGTERM suspends the sessions for the next ternd */
	bool reattach_any_uid;      /* --reattach-uid any: a unix guest of another uid may come back */
	int shutdown_grace_ms;
	char state_dir[4096];       /* journals and the snapshot store */
	unsigned sessions_max;      /* sessions remembered beyond a worker (suspended ...) */
	char vm_dir[64];            /* libvirt domains' sockets: VMDIR/UUID.sock fits sun_path */
	char ivshmem_dir[256];      /* libvirt domains' ivshmem BAR files: DIR/tern-UUID */
	/* What a service manager passed (socket activation), taken by main
	 * before it opened anything; supervisor_run claims or closes them. */
	struct service_sockets passed;
};

/* Run until SIGTERM or SIGINT. Returns the process exit status. */
int supervisor_run(struct supervisor_config *cfg);

#endif
