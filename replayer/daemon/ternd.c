/* ternd: the tern daemon.
 *
 *   ternd [options]            run the supervisor (foreground)
 *   ternd status [--json]      list the sessions of a running ternd
 *   ternd metrics              its counters, in Prometheus's text format
 *
 * Options come from an optional config file (--config FILE, `key = value`
 * lines, the same keys as the long options without dashes) and then the
 * command line, which wins.
 */
#define LOG_PREFIX "ternd: "
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "control.h"
#include "control_msg.h"
#include "ivshmem_bar.h"
#include "log.h"
#include "supervisor.h"
#include "ternd_client.h"
#include "tls.h"
#include "units.h"

#define ARENA_BASE_DEFAULT 0x200000000000ull    /* 32 TiB: clear of the heap, libraries and stacks */
#define ARENA_SIZE_DEFAULT (512ull << 30)
/* Guest VMM reservations (PyTorch's expandable segments reserve about 1.1x
 * the device's memory each): address space only, after room for 16 devices' arenas. */
#define VMM_SIZE_DEFAULT (4ull << 40)

struct ternd_options {
	struct supervisor_config sv;
	const char *sim_kernels[SUPERVISOR_SIM_KERNELS_MAX + 1];
	unsigned sim_kernel_count;
	char backend[16];
	char log_file[4096];
	int log_level;
	bool json;
	bool device_given;      /* --device: else the first of --devices */
	char tls_cert[4096];    /* --tls-cert, --tls-key, --tls-ca: "" when not given */
	char tls_key[4096];
	char tls_ca[4096];
};

static void usage(FILE *out)
{
	fprintf(out,
		"usage: ternd [options]\n"
		"       ternd status [--control PATH] [--json]\n"
		"       ternd metrics [--control PATH]   (Prometheus text format)\n"
		"\n"
		"  --listen URL         unix:PATH, tcp://HOST:PORT, tls://HOST:PORT or vsock://CID:PORT\n"
		"                       (repeatable; default " TRANSPORT_DEFAULT_URL ")\n"
		"  --control PATH       control socket (default " CONTROL_DEFAULT_PATH ")\n"
		"  --migrate-listen URL\n"
		"                       tcp://HOST:PORT, tls://HOST:PORT (with --tls-cert, --tls-key)\n"
		"                       or unix:PATH: live migrations in (needs --token-file;\n"
		"                       docs/migration.md)\n"
		"  --migrate-advertise URL\n"
		"                       where other ternd reach --migrate-listen, sent to a source\n"
		"                       when a libvirt domain migrates here (default: --migrate-listen\n"
		"                       unless it is a wildcard address)\n"
		"  --ckpt PATH          ckpt, which sends a libvirt domain's GPU state out when its\n"
		"                       destination asks (default " TERN_CKPT_DEFAULT ")\n"
		"  --metrics-listen URL\n"
		"                       tcp://HOST:PORT: serve GET /metrics (ternd metrics' text) over\n"
		"                       HTTP there; a loopback address only, unless written\n"
		"                       public:tcp://HOST:PORT (default: none)\n"
		"  --backend NAME       cuda, sim or auto (default auto: cuda when a GPU driver loads)\n"
		"  --driver PATH        libcuda.so.1 for the cuda backend (default: the system's)\n"
		"  --sim-kernels PATH   CPU kernel plugin for the sim backend (repeatable)\n"
		"  --opencl-platform NAME\n"
		"                       the host's OpenCL platform guests' OpenCL calls run on: the\n"
		"                       first whose name contains NAME (default: the first;\n"
		"                       docs/opencl.md)\n"
		"  --opencl-library PATH\n"
		"                       the OpenCL loader to open (default libOpenCL.so.1)\n"
		"  --sim-memory SIZE    memory of the simulated device (default 16G)\n"
		"  --sim-devices N      simulated devices (default 1)\n"
		"  --sim-missing-kernels refuse|skip\n"
		"                       a launch of a kernel without a CPU version fails (default)\n"
		"                       or succeeds doing nothing (to see what a library calls)\n"
		"  --sim-managed-base ADDR\n"
		"                       where the sim places __managed__ variables (default\n"
		"                       0x100000000000; tests restore across two bases)\n"
		"  --device N           GPU the guest's device 0 runs on (default: the first of\n"
		"                       --devices, else 0)\n"
		"  --devices LIST       GPUs a session sees, e.g. 0,1 (default: all; the guest's\n"
		"                       device i is the i-th from --device, wrapping)\n"
		"  --quota SIZE         device memory per session, e.g. 8G (default: no limit)\n"
		"  --arena-base ADDR    fixed address of each session's arena (default 0x%llx)\n"
		"  --arena-size SIZE    size of the arena of each device (default 512G)\n"
		"  --vmm-size SIZE      address space for the guest's VMM reservations, after room\n"
		"                       for 16 arenas (default 4T; 0 refuses cuMemAddressReserve)\n"
		"  --state-dir DIR      journals and the snapshot store (default /var/lib/tern);\n"
		"                       one ternd per state directory\n"
		"  --vm-dir DIR         the sockets of attached libvirt domains, DIR/UUID.sock\n"
		"                       (default " SUPERVISOR_VM_DIR_DEFAULT "; docs/libvirt.md)\n"
		"  --ivshmem-dir DIR    the domains' ivshmem BAR files, DIR/tern-UUID (default\n"
		"                       " SUPERVISOR_IVSHMEM_DIR_DEFAULT ", where libvirt puts <shmem name='tern-UUID'>)\n"
		"  --ivshmem-slot SIZE  each session's slot of its domain's BAR (default 32M)\n"
		"  --sessions-max N     sessions remembered beyond their worker: suspended,\n"
		"                       restoring, and the latest snapshot of others (default %u)\n"
		"  --token-file FILE    shared secret tcp guests prove they hold (16-255 bytes, one\n"
		"                       final newline allowed; not readable by others)\n"
		"  --tls-cert FILE      tls:// listeners' certificate (PEM; libvirt's layout:\n"
		"                       /etc/pki/tern/servercert.pem)\n"
		"  --tls-key FILE       its private key (/etc/pki/tern/private/serverkey.pem)\n"
		"  --tls-ca FILE        require client certificates signed by this CA\n"
		"                       (/etc/pki/CA/cacert.pem; default: none asked for)\n"
		"  --socket-group NAME  guest sockets root:NAME 0660, control socket 0660 and open\n"
		"                       to NAME's members (default: guest 0660, control 0600)\n"
		"  --vm-socket-group NAME\n"
		"                       the domain sockets (--vm-dir) root:NAME, for QEMU's group,\n"
		"                       and nothing else (default: --socket-group's)\n"
		"  --on-stop end|suspend\n"
		"                       at SIGTERM: end every session (default), or suspend each\n"
		"                       at a call boundary so that the next ternd on this state\n"
		"                       directory restores it when its guest reconnects\n"
		"  --reattach-uid owner|any\n"
		"                       who may come back to a unix guest's session: its uid only\n"
		"                       (default) or any uid that holds its credential\n"
		"  --hello-timeout MS   a connection's time from accept to a whole hello (3000)\n"
		"  --preauth-per-source N\n"
		"                       connections of one address or uid before their hello (64)\n"
		"  --preauth-max N      all connections before their hello (1024)\n"
		"  --log-level LEVEL    error, warn, info or debug (default info)\n"
		"  --log-file FILE      append the log there instead of stderr\n"
		"  --config FILE        read options from FILE first\n",
		ARENA_BASE_DEFAULT, SUPERVISOR_SESSIONS_DEFAULT);
}

/* A whole decimal number from @min to @max. */
static int count_parse(const char *value, unsigned long min, unsigned long max, unsigned *out)
{
	char *end;
	unsigned long n = strtoul(value, &end, 10);

	if (!*value || *end || n < min || n > max)
		return -EINVAL;
	*out = (unsigned)n;
	return 0;
}

/* One place for every option, from the command line or the config file. */
static int option_apply(struct ternd_options *o, const char *key, const char *value)
{
	uint64_t v;
	int ret;

	if (!strcmp(key, "listen")) {
		if (o->sv.listen_count == SUPERVISOR_LISTEN_MAX)
			return -E2BIG;
		return transport_url_parse(value, &o->sv.listen[o->sv.listen_count++]);
	}
	if (!strcmp(key, "migrate-listen") || !strcmp(key, "migrate_listen")) {
		o->sv.migrate_listen_set = true;
		ret = transport_url_parse(value, &o->sv.migrate_listen);
		/* A migration stream is a transport of its own: tcp, tls or a unix path. */
		if (!ret && o->sv.migrate_listen.kind != TRANSPORT_TCP && o->sv.migrate_listen.kind != TRANSPORT_TLS &&
		    o->sv.migrate_listen.kind != TRANSPORT_UNIX)
			ret = -EINVAL;
		return ret;
	}
	if (!strcmp(key, "migrate-advertise") || !strcmp(key, "migrate_advertise")) {
		struct transport_url u;

		if (transport_url_parse(value, &u) || (u.kind != TRANSPORT_TCP && u.kind != TRANSPORT_UNIX))
			return -EINVAL;
		return snprintf(o->sv.migrate_advertise, sizeof(o->sv.migrate_advertise), "%s", value) <
		       (int)sizeof(o->sv.migrate_advertise) ? 0 : -ENAMETOOLONG;
	}
	if (!strcmp(key, "ckpt"))
		return snprintf(o->sv.ckpt_path, sizeof(o->sv.ckpt_path), "%s", value) < (int)sizeof(o->sv.ckpt_path) ?
		       0 : -ENAMETOOLONG;
	if (!strcmp(key, "metrics-listen") || !strcmp(key, "metrics_listen")) {
		/* "public:" says in so many words that anyone who reaches the
		 * address may read the metrics. */
		bool public = !strncmp(value, "public:", 7);

		ret = transport_url_parse(value + (public ? 7 : 0), &o->sv.metrics_listen);
		if (!ret && o->sv.metrics_listen.kind != TRANSPORT_TCP)
			ret = -EINVAL;
		o->sv.metrics_listen_set = !ret;
		o->sv.metrics_public = public;
		return ret;
	}
	if (!strcmp(key, "control"))
		return snprintf(o->sv.control_path, sizeof(o->sv.control_path), "%s", value) <
		       (int)sizeof(o->sv.control_path) ? 0 : -ENAMETOOLONG;
	if (!strcmp(key, "backend")) {
		if (strcmp(value, "cuda") && strcmp(value, "sim") && strcmp(value, "auto"))
			return -EINVAL;
		snprintf(o->backend, sizeof(o->backend), "%s", value);
		return 0;
	}
	if (!strcmp(key, "opencl-platform")) {
		o->sv.worker.opencl.platform = strdup(value);
		return 0;
	}
	if (!strcmp(key, "opencl-library")) {
		o->sv.worker.opencl.library = strdup(value);
		return 0;
	}
	if (!strcmp(key, "driver")) {
		o->sv.worker.backend_cfg.driver_path = strdup(value);
		return 0;
	}
	if (!strcmp(key, "sim-kernels") || !strcmp(key, "sim_kernels")) {
		char *list = strdup(value), *save = NULL;

		for (char *p = strtok_r(list, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
			if (o->sim_kernel_count == SUPERVISOR_SIM_KERNELS_MAX)
				return -E2BIG;
			o->sim_kernels[o->sim_kernel_count++] = p;
		}
		return 0;
	}
	if (!strcmp(key, "device")) {
		char *end;
		long d = strtol(value, &end, 10);

		if (*end || d < 0 || d > 1024)
			return -EINVAL;
		o->sv.worker.exec_cfg.device = (int)d;
		o->device_given = true;
		return 0;
	}
	if (!strcmp(key, "devices")) {
		struct exec_config *e = &o->sv.worker.exec_cfg;
		char *list = strdup(value), *save = NULL;

		if (!list)
			return -ENOMEM;
		e->device_count = 0;
		for (char *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
			char *end;
			long d = strtol(p, &end, 10);

			if (*end || d < 0 || d > 1024 || e->device_count == EXEC_DEVICES_MAX) {
				free(list);
				return -EINVAL;
			}
			for (unsigned i = 0; i < e->device_count; i++)
				if (e->devices[i] == d) {
					free(list);
					return -EINVAL;     /* a device listed twice */
				}
			e->devices[e->device_count++] = (int)d;
		}
		free(list);
		return e->device_count ? 0 : -EINVAL;
	}
	if (!strcmp(key, "quota")) {
		ret = units_size_parse(value, &v);
		o->sv.worker.exec_cfg.quota = v;
		return ret;
	}
	if (!strcmp(key, "sim-devices") || !strcmp(key, "sim_devices")) {
		ret = units_size_parse(value, &v);
		if (!ret && (v < 1 || v > 16))
			ret = -EINVAL;
		o->sv.worker.backend_cfg.sim_device_count = (unsigned)v;
		return ret;
	}
	if (!strcmp(key, "sim-memory") || !strcmp(key, "sim_memory")) {
		ret = units_size_parse(value, &v);
		o->sv.worker.backend_cfg.sim_memory = v;
		return ret;
	}
	if (!strcmp(key, "sim-missing-kernels") || !strcmp(key, "sim_missing_kernels")) {
		if (strcmp(value, "refuse") && strcmp(value, "skip"))
			return -EINVAL;
		o->sv.worker.backend_cfg.sim_skip_missing = !strcmp(value, "skip");
		return 0;
	}
	if (!strcmp(key, "sim-managed-base") || !strcmp(key, "sim_managed_base")) {
		ret = units_size_parse(value, &v);
		o->sv.worker.backend_cfg.sim_managed_base = v;
		return ret;
	}
	if (!strcmp(key, "arena-base") || !strcmp(key, "arena_base")) {
		ret = units_size_parse(value, &v);
		o->sv.worker.exec_cfg.arena_base = v;
		return ret;
	}
	if (!strcmp(key, "arena-size") || !strcmp(key, "arena_size")) {
		ret = units_size_parse(value, &v);
		o->sv.worker.exec_cfg.arena_size = v;
		return ret;
	}
	if (!strcmp(key, "vmm-size") || !strcmp(key, "vmm_size")) {
		ret = units_size_parse(value, &v);
		o->sv.worker.exec_cfg.vmm_size = v;
		return ret;
	}
	if (!strcmp(key, "ivshmem-dir") || !strcmp(key, "ivshmem_dir"))
		return snprintf(o->sv.ivshmem_dir, sizeof(o->sv.ivshmem_dir), "%s", value) <
		       (int)sizeof(o->sv.ivshmem_dir) ? 0 : -ENAMETOOLONG;
	if (!strcmp(key, "ivshmem-slot") || !strcmp(key, "ivshmem_slot")) {
		ret = units_size_parse(value, &v);
		if (!ret && (v < IVSHMEM_SLOT_BYTES_MIN || v % 4096 || v > IVSHMEM_BAR_BYTES_MAX))
			ret = -EINVAL;
		o->sv.worker.ivshmem_slot_bytes = v;
		return ret;
	}
	if (!strcmp(key, "vm-dir") || !strcmp(key, "vm_dir"))
		return snprintf(o->sv.vm_dir, sizeof(o->sv.vm_dir), "%s", value) <
		       (int)sizeof(o->sv.vm_dir) ? 0 : -ENAMETOOLONG;
	if (!strcmp(key, "state-dir") || !strcmp(key, "state_dir"))
		return snprintf(o->sv.state_dir, sizeof(o->sv.state_dir), "%s", value) <
		       (int)sizeof(o->sv.state_dir) ? 0 : -ENAMETOOLONG;
	if (!strcmp(key, "sessions-max") || !strcmp(key, "sessions_max"))
		return count_parse(value, 1, SUPERVISOR_SESSIONS_LIMIT, &o->sv.sessions_max);
	if (!strcmp(key, "tls-cert") || !strcmp(key, "tls_cert"))
		return snprintf(o->tls_cert, sizeof(o->tls_cert), "%s", value) < (int)sizeof(o->tls_cert) ?
		       0 : -ENAMETOOLONG;
	if (!strcmp(key, "tls-key") || !strcmp(key, "tls_key"))
		return snprintf(o->tls_key, sizeof(o->tls_key), "%s", value) < (int)sizeof(o->tls_key) ?
		       0 : -ENAMETOOLONG;
	if (!strcmp(key, "tls-ca") || !strcmp(key, "tls_ca"))
		return snprintf(o->tls_ca, sizeof(o->tls_ca), "%s", value) < (int)sizeof(o->tls_ca) ?
		       0 : -ENAMETOOLONG;
	if (!strcmp(key, "token-file") || !strcmp(key, "token_file")) {
		char err[512];

		ret = auth_token_file_read(value, &o->sv.token, err, sizeof(err));
		if (ret)
			fprintf(stderr, "ternd: %s\n", err);
		else if (!realpath(value, o->sv.token_path))
			o->sv.token_path[0] = 0;
		return ret;
	}
	if (!strcmp(key, "socket-group") || !strcmp(key, "socket_group") || !strcmp(key, "vm-socket-group") ||
	    !strcmp(key, "vm_socket_group")) {
		struct group *g = getgrnam(value);
		bool vm = key[0] == 'v';

		if (!g) {
			fprintf(stderr, "ternd: no group named %s\n", value);
			return -EINVAL;
		}
		*(vm ? &o->sv.vm_socket_group : &o->sv.socket_group) = g->gr_gid;
		*(vm ? &o->sv.vm_socket_group_set : &o->sv.socket_group_set) = true;
		return 0;
	}
	if (!strcmp(key, "on-stop") || !strcmp(key, "on_stop")) {
		if (strcmp(value, "end") && strcmp(value, "suspend"))
			return -EINVAL;
		o->sv.stop_suspends = !strcmp(value, "suspend");
		return 0;
	}
	if (!strcmp(key, "reattach-uid") || !strcmp(key, "reattach_uid")) {
		if (strcmp(value, "owner") && strcmp(value, "any"))
			return -EINVAL;
		o->sv.reattach_any_uid = !strcmp(value, "any");
		return 0;
	}
	if (!strcmp(key, "hello-timeout") || !strcmp(key, "hello_timeout")) {
		unsigned ms = 0;

		ret = count_parse(value, 100, 600000, &ms);
		o->sv.preauth.timeout_ms = (int)ms;
		return ret;
	}
	if (!strcmp(key, "preauth-per-source") || !strcmp(key, "preauth_per_source"))
		return count_parse(value, 1, 65536, &o->sv.preauth.per_source_max);
	if (!strcmp(key, "preauth-max") || !strcmp(key, "preauth_max"))
		return count_parse(value, 1, 65536, &o->sv.preauth.max);
	if (!strcmp(key, "log-level") || !strcmp(key, "log_level")) {
		ret = log_level_parse(value);
		if (ret < 0)
			return ret;
		o->log_level = ret;
		return 0;
	}
	if (!strcmp(key, "log-file") || !strcmp(key, "log_file"))
		return snprintf(o->log_file, sizeof(o->log_file), "%s", value) < (int)sizeof(o->log_file) ?
		       0 : -ENAMETOOLONG;
	return -ENOENT;
}

static int config_read(struct ternd_options *o, const char *path)
{
	char line[4096];
	unsigned lineno = 0;
	FILE *f = fopen(path, "r");

	if (!f) {
		fprintf(stderr, "ternd: cannot read %s: %s\n", path, strerror(errno));
		return -errno;
	}
	while (fgets(line, sizeof(line), f)) {
		char *key = line, *eq, *value, *end;
		int ret;

		lineno++;
		key += strspn(key, " \t");
		if (*key == '#' || *key == '\n' || !*key)
			continue;
		eq = strchr(key, '=');
		if (!eq) {
			fprintf(stderr, "ternd: %s:%u: expected key = value\n", path, lineno);
			fclose(f);
			return -EINVAL;
		}
		for (end = eq; end > key && (end[-1] == ' ' || end[-1] == '\t'); end--)
			;
		*end = 0;
		value = eq + 1 + strspn(eq + 1, " \t");
		value[strcspn(value, "\r\n")] = 0;
		for (end = value + strlen(value); end > value && (end[-1] == ' ' || end[-1] == '\t'); end--)
			*--end = 0;
		ret = option_apply(o, key, value);
		if (ret) {
			fprintf(stderr, "ternd: %s:%u: %s = %s: %s\n", path, lineno, key, value,
				ret == -ENOENT ? "unknown option" : strerror(-ret));
			fclose(f);
			return ret;
		}
	}
	fclose(f);
	return 0;
}

static bool cuda_driver_present(const char *path)
{
	void *h;

	/* Loading the driver without cuInit leaves nothing behind for the workers. */
	if (access("/dev/nvidiactl", F_OK))
		return false;
	h = dlopen(path ? path : "libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
	if (!h)
		return false;
	dlclose(h);
	return true;
}

/* Sockets default to /run/tern, which may not exist yet. */
static void socket_dir_make(const char *socket_path)
{
	char dir[4096], *slash;

	snprintf(dir, sizeof(dir), "%s", socket_path);
	slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = 0;
		mkdir(dir, 0755);
	}
}

/* The tls:// listeners' certificate (guests', and --migrate-listen's),
 * checked now: a wrong file is a start-up error, not every guest's refusal
 * later. 0 or -1 (said). */
static int tls_open(struct ternd_options *o)
{
	struct tls_creds_config cfg = { .server = true, .cert_file = o->tls_cert, .key_file = o->tls_key,
					.ca_file = o->tls_ca[0] ? o->tls_ca : NULL };
	bool wanted = false;
	char err[512];
	int ret;

	for (unsigned i = 0; i < o->sv.listen_count; i++)
		wanted |= o->sv.listen[i].kind == TRANSPORT_TLS;
	wanted |= o->sv.migrate_listen_set && o->sv.migrate_listen.kind == TRANSPORT_TLS;
	if (!wanted) {
		if (o->tls_cert[0] || o->tls_key[0] || o->tls_ca[0])
			fprintf(stderr, "ternd: --tls-cert, --tls-key and --tls-ca serve tls:// listeners, "
				"and there is none (--listen or --migrate-listen tls://HOST:PORT)\n");
		return 0;
	}
	if (!o->tls_cert[0] || !o->tls_key[0]) {
		fprintf(stderr, "ternd: a tls:// listener needs --tls-cert and --tls-key\n");
		return -1;
	}
	ret = tls_creds_open(&cfg, &o->sv.tls, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "ternd: %s\n", err);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct ternd_options o = { 0 };
	const char *config = NULL;
	bool status = false, metrics = false;
	char err[512];
	int i, ret, log_fd = -1;

	o.log_level = LOG_INFO;
	snprintf(o.backend, sizeof(o.backend), "auto");
	snprintf(o.sv.control_path, sizeof(o.sv.control_path), "%s", CONTROL_DEFAULT_PATH);
	snprintf(o.sv.state_dir, sizeof(o.sv.state_dir), "/var/lib/tern");
	snprintf(o.sv.vm_dir, sizeof(o.sv.vm_dir), "%s", SUPERVISOR_VM_DIR_DEFAULT);
	snprintf(o.sv.ckpt_path, sizeof(o.sv.ckpt_path), "%s", TERN_CKPT_DEFAULT);
	snprintf(o.sv.ivshmem_dir, sizeof(o.sv.ivshmem_dir), "%s", SUPERVISOR_IVSHMEM_DIR_DEFAULT);
	o.sv.worker.ivshmem_slot_bytes = IVSHMEM_SLOT_BYTES_DEFAULT;
	o.sv.worker.exec_cfg.arena_base = ARENA_BASE_DEFAULT;
	o.sv.worker.exec_cfg.arena_size = ARENA_SIZE_DEFAULT;
	o.sv.worker.exec_cfg.vmm_size = VMM_SIZE_DEFAULT;
	o.sv.preauth = (struct preauth_config){ .timeout_ms = 3000, .per_source_max = 64, .max = 1024 };
	o.sv.shutdown_grace_ms = 5000;
	o.sv.sessions_max = SUPERVISOR_SESSIONS_DEFAULT;
	if (argc > 1 && !strcmp(argv[1], "status"))
		status = true;
	if (argc > 1 && !strcmp(argv[1], "metrics"))
		status = metrics = true;
	/* Before anything is opened: a descriptor LISTEN_FDS counts that is
	 * not open would be taken for the first file ternd opens. */
	if (!status && service_sockets_take(&o.sv.passed, err, sizeof(err))) {
		fprintf(stderr, "ternd: socket activation: %s: ternd does not start\n", err);
		return 2;
	}
	for (i = 1 + status; i < argc; i++)
		if (!strcmp(argv[i], "--config") && i + 1 < argc)
			config = argv[i + 1];
	if (config && config_read(&o, config))
		return 2;
	for (i = 1 + status; i < argc; i++) {
		const char *arg = argv[i];

		if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
			usage(stdout);
			return 0;
		}
		if (!strcmp(arg, "--json")) {
			o.json = true;
			continue;
		}
		if (strncmp(arg, "--", 2) || i + 1 >= argc) {
			fprintf(stderr, "ternd: unexpected argument '%s'\n", arg);
			usage(stderr);
			return 2;
		}
		if (!strcmp(arg, "--config")) {
			i++;
			continue;
		}
		ret = option_apply(&o, arg + 2, argv[i + 1]);
		if (ret) {
			fprintf(stderr, "ternd: %s %s: %s\n", arg, argv[i + 1],
				ret == -ENOENT ? "unknown option" : strerror(-ret));
			return 2;
		}
		i++;
	}
	if (metrics)
		return ternd_metrics_print(o.sv.control_path);
	if (status)
		return ternd_status_print(o.sv.control_path, o.json);

	if (o.log_file[0]) {
		log_fd = open(o.log_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
		if (log_fd < 0) {
			fprintf(stderr, "ternd: cannot open %s: %s\n", o.log_file, strerror(errno));
			return 2;
		}
	}
	log_open("ternd", (enum log_level)o.log_level, log_fd);
	if (!o.sv.listen_count)
		transport_url_parse(TRANSPORT_DEFAULT_URL, &o.sv.listen[o.sv.listen_count++]);
	if (tls_open(&o))
		return 2;
	if (!o.device_given && o.sv.worker.exec_cfg.device_count)
		o.sv.worker.exec_cfg.device = o.sv.worker.exec_cfg.devices[0];
	if (!strcmp(o.backend, "auto"))
		snprintf(o.backend, sizeof(o.backend), "%s",
			 cuda_driver_present(o.sv.worker.backend_cfg.driver_path) ? "cuda" : "sim");
	o.sv.worker.backend = o.backend;
	o.sv.worker.backend_cfg.sim_kernels = o.sim_kernel_count ? o.sim_kernels : NULL;
	for (i = 0; i < (int)o.sv.listen_count; i++)
		if (o.sv.listen[i].kind == TRANSPORT_UNIX)
			socket_dir_make(o.sv.listen[i].path);
	socket_dir_make(o.sv.control_path);
	if (mkdir(o.sv.state_dir, 0700) && errno != EEXIST) {
		fprintf(stderr, "ternd: cannot create the state directory %s: %s\n", o.sv.state_dir, strerror(errno));
		return 2;
	}
	return supervisor_run(&o.sv);
}
