/* What the supervisor's files share (supervisor.c, supervisor_sessions.c):
 * its state and the records it keeps in the state directory. Private to
 * replayer/daemon/.
 */
#ifndef TERN_SUPERVISOR_INTERNAL_H
#define TERN_SUPERVISOR_INTERNAL_H

#include "supervisor.h"
#include "auth.h"
#include "control_msg.h"
#include "ipc_broker.h"
#include "preauth.h"
#include "session_slot.h"
#include "snap_format.h"
#include "snap_sessions.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Who may come back to a session (common/auth.h): its credential, issued
 * with the session, and the uid of the unix guest that made it. */
struct session_cred {
	bool set;
	bool has_uid;
	uint32_t uid;
	uint8_t secret[AUTH_CREDENTIAL_BYTES];
};

/* A ckpt or ternd-status client whose request line is not whole yet: read
 * from the poll loop, so that an idle one delays nothing. */
#define CONTROL_CLIENTS_MAX 32
#define CONTROL_CLIENT_TIMEOUT_MS 2000

struct control_client {
	int fd;                             /* -1: free */
	bool refused;                       /* a peer the control socket does not serve */
	uint32_t uid;
	uint64_t deadline_ms;
	size_t len;
	char line[CONTROL_REQUEST_MAX];
};

/* The supervisor's end of a worker's line channel, and the ckpt client
 * waiting on it (snapshot, suspend, or a restore this worker performs). */
struct worker_link {
	int fd;
	int ipc_fd;                         /* the worker's IPC requests (ipc_broker.h) */
	char buf[WORKER_LINE_MAX];
	size_t len;
	int client_fd;
	bool suspending;
	char snapshot[SNAP_NAME_MAX + 1];   /* the one being written */
	char restoring[SNAP_NAME_MAX + 1];  /* the one it restores, until it is ready */
	int32_t restoring_device;           /* and onto which device */
	bool stopped;                       /* killed for a restore: what it says is stale */
	struct session_cred cred;           /* of the session this worker serves */
	bool told;                          /* its hello was answered (worker_hello) */
	bool hello_deferred;                /* answered once a dead worker is reaped */
};

/* What the supervisor remembers of a session beyond its worker's life; the
 * ids are the sessions file's (snap_sessions.h), which keeps all but the
 * fds across ternd restarts. */
enum session_plan {
	PLAN_NONE = SNAP_PLAN_NONE,
	PLAN_SUSPENDED = SNAP_PLAN_SUSPENDED,   /* parked in a snapshot until `resume` */
	PLAN_RESTORE = SNAP_PLAN_RESTORE,       /* the next worker of the session restores */
};

_Static_assert(SESSION_ID_MAX == SNAP_NAME_MAX + 1, "a session id fits the sessions file");
_Static_assert(SUPERVISOR_SESSIONS_LIMIT == SNAP_SESSIONS_LIMIT, "--sessions-max fits the sessions file");

struct session_known {
	char id[SESSION_ID_MAX];
	enum session_plan plan;
	char snapshot[SNAP_NAME_MAX + 1];  /* for the plan */
	int device;
	char latest[SNAP_NAME_MAX + 1];    /* latest durable snapshot */
	int client_fd;                     /* waiting for the restore to happen */
	int waiting_slot;                  /* a worker told to wait, or -1 */
	struct session_cred cred;          /* for the plan: who may come back */
	/* A restore being checked (restore_check.h) before anything stops. */
	int check_fd;                      /* its answer, or -1 */
	pid_t check_pid;
	int check_client_fd;
	int check_device;
	char check_snapshot[SNAP_NAME_MAX + 1];
	struct session_cred check_cred;      /* the snapshot's, for the plan once checked */
	bool resume_pending;               /* a resume came while its suspend ran: restore once it ends */
};

/* Restore checks at once: each is a child reading a whole snapshot. */
#define RESTORE_CHECKS_MAX 8

struct supervisor {
	struct supervisor_config *cfg;
	int listen_fd[SUPERVISOR_LISTEN_MAX];
	int control_fd;
	int signal_fd;
	struct session_slot *slots;
	struct worker_link links[SESSION_SLOTS];
	struct session_known *known;        /* cfg->sessions_max entries */
	unsigned long sessions_started;
	int state_lock_fd;                  /* flock on STATE/ternd.lock: one ternd per state dir */
	struct ipc_broker *ipc;
	struct preauth preauth;
	struct control_client clients[CONTROL_CLIENTS_MAX];
	uint64_t hellos_refused;            /* failed a check before any fork */
	int backend_devices;                /* probed at start; negative: unknown */
};

/* The slot of the live worker serving @id, other than @except; -1 if none. */
int slot_of_session(struct supervisor *sv, const char *id, int except);

/* supervisor_sessions.c: the sessions ternd knows (STATE/sessions), the
 * state directory's lock and the store's paths. */
void cred_from_manifest(struct session_cred *cred, const struct snap_manifest *m);
struct session_known *known_get(struct supervisor *sv, const char *id, bool create);
int known_save(struct supervisor *sv);
int known_load(struct supervisor *sv);
int state_lock_take(struct supervisor *sv);
void store_path(struct supervisor *sv, char *out, size_t cap);
int store_latest(struct supervisor *sv, const char *session, char *out, size_t cap);

#endif
