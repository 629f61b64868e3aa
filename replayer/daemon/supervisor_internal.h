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
#include "metrics_http.h"
#include "preauth.h"
#include "session_slot.h"
#include "snap_format.h"
#include "snap_migrate.h"
#include "snap_sessions.h"
#include "snap_vm.h"
#include "vm_id.h"

#include <stdbool.h>
#include <stdint.h>
#include <poll.h>
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
	bool serving;                       /* it said ready: it serves the guest's requests */
	bool hello_deferred;                /* answered once a dead worker is reaped */
	int vm_domain;                      /* in a domain's save or snapshot (struct vm_op), or -1 */
	bool vm_held;                       /* it said held */
	bool vm_done;                       /* its snapshot's result came */
	/* A migration's prepared worker (supervisor_standby.c): no guest yet,
	 * its slot's id empty until it adopts one; the session it is for, and
	 * the receiver whose rounds it fills (-1: that receiver ended). */
	bool standby;
	char standby_for[SESSION_ID_MAX];
	int standby_receiver;
	bool standby_answer;                /* that receiver waits to hear the round is filled */
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

/* Libvirt domains attached at once (supervisor_vm.c). */
#define VM_DOMAINS_MAX 64
#define VM_CHECK_PIDS_MAX 128

/* What a domain's request does across its sessions: a consistent snapshot
 * (every worker held at a call boundary before any is copied) for vm-save
 * and vm-snapshot, or the checks of a saved generation for vm-restore. */
enum vm_op_kind { VM_OP_NONE, VM_OP_SAVE, VM_OP_SNAPSHOT, VM_OP_RESTORE };

struct vm_op {
	enum vm_op_kind kind;
	int client_fd;
	bool check_only;                    /* vm-restore check=true */
	bool incremental;                   /* save, snapshot: each on its session's latest */
	char generation[VM_GENERATION_MAX + 1];
	unsigned pending;                   /* workers not held yet, results or checks not in */
	bool copying;                       /* every worker held: snapshots under way */
	char error[CONTROL_TEXT_MAX + 1];   /* the first failure; "" none */
	uint32_t count;
	struct snap_vm_entry *entries;      /* the sessions and their snapshots */
	int *slots;                         /* save, snapshot: each entry's worker */
	int *check_fd;                      /* restore: each entry's check, or -1 */
	struct session_cred *creds;         /* restore: each snapshot's */
	uint32_t checks_started;
};

/* One attached domain: its relay (vm_relay_serve in a child) and the
 * socketpair on which that relay hands over the streams of its guest. */
struct vm_domain {
	bool used;
	char uuid[VM_UUID_LEN + 1];
	char name[VM_NAME_MAX + 1];
	int listen_fd;                      /* VMDIR/UUID.sock, kept to start a relay again */
	int handoff_fd;                     /* streams from the relay (SCM_RIGHTS), -1: none */
	int relay_ctl;                      /* 'R' resets the relay; closing it ends the relay */
	pid_t relay_pid;
	struct vm_op op;
	/* A vm-restore that came before the save it restores was recorded
	 * (libvirt's listener sends vm-save once the save is over, and a
	 * restore may be asked for at once): answered when the save ends, or
	 * refused at the deadline. */
	struct {
		int client_fd;              /* -1: none */
		char generation[VM_GENERATION_MAX + 1];
		bool check_only;
		uint64_t deadline_ms;
	} waiting_restore;
	/* Its live migration by libvirt (supervisor_vm_migrate.c). */
	struct {
		pid_t puller;               /* destination: asking the source for the state; 0: none */
		bool incoming;              /* destination: its sessions' hellos wait for their state */
		int sender;                 /* source: the receiver that serves the pull, -1: none */
		char switch_generation[VM_GENERATION_MAX + 1];  /* source: a switchover before the pull */
	} mig;
};

/* Migration streams received at once (supervisor_migrate.c): each is a
 * child.  A domain's migration takes one per session and one for its pull. */
#define MIGRATE_RECEIVERS_MAX 16
/* Sessions that moved away whose guests are told where they went. */
#define MIGRATE_MOVED_MAX 64

struct migrate_receiver {
	pid_t pid;                          /* 0: ended (or free) */
	int line_fd;                        /* its question at the final round, -1: none */
	/* The streams it awaits (STREAMS): another receiver's stream that
	 * JOINs with this key for this session is handed to it. "": none. */
	char join_key[2 * SNAP_MIGRATE_STREAM_KEY_BYTES + 1];
	char join_session[SNAP_NAME_MAX + 1];
	unsigned join_left;                 /* streams still to join */
};

/* A session that moved: its guest's hello here is answered with url, once
 * it proved the credential (the destination has it too). In memory only:
 * after a ternd restart the guest finds no session here and retries. */
struct migrate_moved {
	bool used;
	char id[SESSION_ID_MAX];
	char url[WIRE_MOVED_URL_MAX + 1];
	struct session_cred cred;
};

struct supervisor {
	struct supervisor_config *cfg;
	int listen_fd[SUPERVISOR_LISTEN_MAX];
	bool listen_passed[SUPERVISOR_LISTEN_MAX];  /* the service manager's socket (socket activation) */
	int control_fd;
	bool control_passed;
	int signal_fd;
	struct session_slot *slots;
	struct worker_link links[SESSION_SLOTS];
	struct session_known *known;        /* cfg->sessions_max entries */
	unsigned long sessions_started;
	int state_lock_fd;                  /* flock on STATE/ternd.lock: one ternd per state dir */
	struct ipc_broker *ipc;
	struct preauth preauth;
	struct control_client clients[CONTROL_CLIENTS_MAX];
	/* For ternd metrics (status); counters.hellos_refused: failed a check
	 * before any fork. */
	struct control_counters counters;
	int backend_devices;                /* probed at start; negative: unknown */
	struct vm_domain domains[VM_DOMAINS_MAX];
	pid_t vm_check_pids[VM_CHECK_PIDS_MAX];  /* domains' restore checks not reaped yet; 0: free */
	bool stopping;                      /* --on-stop suspend: suspending the sessions before exit */
	uint64_t stop_deadline_ms;          /* then exits regardless (CLOCK_MONOTONIC) */
	int migrate_fd;                     /* --migrate-listen, -1: none */
	struct metrics_http *metrics;       /* --metrics-listen, NULL: none */
	struct migrate_receiver receivers[MIGRATE_RECEIVERS_MAX];
	struct migrate_moved moved[MIGRATE_MOVED_MAX];
};

/* How long a stop with --on-stop suspend waits for the sessions' suspends. */
#define STOP_SUSPEND_MS 60000

/* The slot of the live worker serving @id, other than @except; -1 if none. */
int slot_of_session(struct supervisor *sv, const char *id, int except);

/* supervisor.c: claim a free slot (its index in *@index), or NULL; fork a
 * worker into it (docs: worker_spawn in supervisor.c); name its guest's
 * end for status. */
struct session_slot *slot_claim(struct supervisor *sv, unsigned *index);
int worker_spawn(struct supervisor *sv, unsigned index, struct worker_config *wcfg, struct preauth_conn *c,
		 const struct session_cred *cred);
void slot_peer_name(struct supervisor *sv, struct session_slot *slot, const struct preauth_conn *c);

/* supervisor_standby.c: the destination's prepared workers of incoming
 * migrations (docs/migration.md, "The prepared worker"). A round of
 * @session stored by receiver @receiver (@final: its restore is planned):
 * fill it into the session's prepared worker, forked at the first (or
 * when @snapshot is NULL, as the first round begins). True when a round
 * of no final is being filled: its receiver hears "filled" once it is
 * (standby_filled), and should be told now otherwise. */
bool standby_round(struct supervisor *sv, const char *session, const char *snapshot, int receiver, bool final);
/* The prepared worker of slot @index filled a round, or is gone: the
 * receiver waiting for it hears "filled". */
void standby_filled(struct supervisor *sv, unsigned index);
/* The hello on @c for @id, checked: hand it to @id's prepared worker.
 * True when it took @c; false when there is none (or it cannot take it,
 * and is ended): fork a worker as for any hello. */
bool standby_adopt(struct supervisor *sv, struct preauth_conn *c, const char *id, const struct session_cred *cred,
		   const uint8_t credential_wire[AUTH_CREDENTIAL_BYTES]);
/* End the prepared workers no migration will use: their receiver ended
 * without a restore planned from its final round. */
void standby_gc(struct supervisor *sv);
/* Receiver @receiver ended. */
void standby_receiver_gone(struct supervisor *sv, int receiver);

/* supervisor.c, for supervisor_vm.c. */
void client_send(int *fd, const struct control_reply *r);
void client_finish(int *fd, const struct control_reply *r);
void client_fail(int *fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int link_send(struct worker_link *l, const struct control_link *m);
void supervisor_child_close(struct supervisor *sv, const struct preauth_conn *keep);
void supervisor_fds_close(void *opaque);

/* supervisor_sockets.c: bind (or claim from the service manager) the
 * guests' listeners, the migration listener, the control socket and the
 * metrics endpoint: 0, or -1 said; and close them, unlinking only the
 * socket files ternd made. */
int supervisor_sockets_open(struct supervisor *sv);
void supervisor_sockets_close(struct supervisor *sv);
int socket_listen(const struct supervisor_config *cfg, const struct transport_url *url, mode_t mode);
int socket_listen_group(const struct transport_url *url, mode_t mode, bool group, gid_t gid);
/* Give the socket file @path exactly @mode (and the group @gid when
 * @group): 0 or -errno. */
int socket_mode_set(const char *path, mode_t mode, bool group, gid_t gid);

/* supervisor.c: one whole request line from a control client: answer it
 * (or hand the client to whoever answers later). */
void control_dispatch(struct supervisor *sv, int fd, char *line, size_t n);

/* supervisor_control.c: the control socket's clients and read-only answers. */
void control_accept(struct supervisor *sv);
void control_client_readable(struct supervisor *sv, struct control_client *cl);
/* Close control clients that sent no whole line in time; the ms until the
 * next deadline, or -1. */
int control_clients_expire(struct supervisor *sv);
/* The status reply: every session, its state and numbers. 0 or -ENOMEM. */
int reply_status(struct supervisor *sv, struct control_reply *r);
/* Answer the snapshots op on @client. */
void reply_snapshots(struct supervisor *sv, int client);
/* GET /metrics' text (metrics_http_body_fn; @opaque is the supervisor):
 * the status and snapshots answers through metrics_text_write. */
int metrics_body(void *opaque, char **text, size_t *len);

/* supervisor_vm.c: libvirt domains (docs/libvirt.md, "ternd's side"). */
void vm_domains_init(struct supervisor *sv);
/* Listen again for the domains the state directory records. */
void vm_domains_load(struct supervisor *sv);
void vm_domains_stop(struct supervisor *sv);
/* The control ops vm-*; @client is answered (now or when the op is done). */
void vm_request(struct supervisor *sv, int client, const struct control_request *req);
/* Add the fds the poll loop watches for domains to @pfd (from @n); returns
 * the new count.  vm_poll_handle reads what they said. */
unsigned vm_poll_fill(struct supervisor *sv, struct pollfd *pfd, unsigned n, unsigned *first);
void vm_poll_handle(struct supervisor *sv, const struct pollfd *pfd, unsigned first, unsigned end);
/* Start the restores that waited for a save, refuse those past their
 * deadline; the milliseconds until the next deadline, or -1. */
int vm_restores_waiting(struct supervisor *sv);
/* The most fds vm_poll_fill adds. */
#define VM_POLL_MAX (VM_DOMAINS_MAX * (1 + RESTORE_CHECKS_MAX))
/* A worker in a domain's op said held, or sent its snapshot's result. */
void vm_worker_held(struct supervisor *sv, unsigned index);
void vm_worker_result(struct supervisor *sv, unsigned index, const struct control_reply *r);
/* Worker @index ended: an op waiting on it hears so. */
void vm_worker_gone(struct supervisor *sv, unsigned index);
/* A child was reaped: true when @pid was a relay or a domain's restore check. */
bool vm_child_reaped(struct supervisor *sv, pid_t pid);
/* Domain of a session id, or NULL (not a domain's, or not attached). */
const struct vm_domain *vm_domain_of_session(struct supervisor *sv, const char *id);

/* supervisor_migrate.c: live migration (docs/migration.md). */
void migrate_init(struct supervisor *sv);
/* Listen on --migrate-listen if it is set: 0, or -1 (logged). */
int migrate_listen_open(struct supervisor *sv);
void migrate_stop(struct supervisor *sv);
void migrate_fds_close(struct supervisor *sv);
#define MIGRATE_POLL_MAX (1 + MIGRATE_RECEIVERS_MAX)
unsigned migrate_poll_fill(struct supervisor *sv, struct pollfd *pfd, unsigned n, unsigned *first);
void migrate_poll_handle(struct supervisor *sv, const struct pollfd *pfd, unsigned first, unsigned end);
/* A child was reaped: true when @pid was a receiver. */
bool migrate_child_reaped(struct supervisor *sv, pid_t pid, int status);
/* The op migrated; @client is answered. */
void migrate_request(struct supervisor *sv, int client, const struct control_request *req);
/* The record of session @id if it moved away, or NULL. */
const struct migrate_moved *migrate_moved_find(struct supervisor *sv, const char *id);

/* supervisor_vm_migrate.c: virsh migrate of a domain's GPU state. */
/* Destination: ask the source at @url for domain @d's state (vm-incoming,
 * from control client @client); 0, or -errno with why in @err. */
int vm_incoming_start(struct supervisor *sv, struct vm_domain *d, int client, const char *url, char *err,
		      size_t errlen);
/* Whether the hello of session @id of domain @d must wait for its state. */
bool vm_incoming_waits(struct supervisor *sv, const struct vm_domain *d, const char *id);
/* Whether a migration stream of session @id (UUID/ID) is expected here. */
bool vm_incoming_expects(struct supervisor *sv, const char *id);
/* Source: libvirt's switchover (vm-switch): 0 or -EIO. */
int vm_switch(struct supervisor *sv, struct vm_domain *d, const char *generation);
/* Source: receiver @receiver asks to serve a pull of domain @uuid: NULL
 * (and in @more a line to send it after "ok", or ""), or why not. */
const char *vm_pull_accept(struct supervisor *sv, unsigned receiver, const char *uuid, char *more, size_t cap);
/* Either side: end the domain's migration (vm-drop, vm-detach). */
void vm_migration_end(struct supervisor *sv, struct vm_domain *d);
/* A child was reaped: true when @pid was a domain's puller. */
bool vm_migration_reaped(struct supervisor *sv, pid_t pid, int status);
/* Receiver @receiver ended. */
void vm_receiver_gone(struct supervisor *sv, unsigned receiver);
/* In a receiver child: serve the PULL in c->buf (@len bytes) for the
 * domain AUTH named (@session); its exit status. */
struct snap_migrate_conn;
int migrate_pull_serve(struct supervisor *sv, struct snap_migrate_conn *c, uint32_t len, int line,
		       const char *session);

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
