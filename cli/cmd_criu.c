/* ckpt dump and ckpt restore --process: whole processes with CRIU
 * (docs/criu.md).
 *
 * Both run criu with tern's plugin (tern_criu.so) and nothing else of
 * tern's: the plugin suspends the process's sessions once criu has frozen
 * it and records their snapshots in the images folder, and on restore has
 * ternd restore them when the process reconnects.  So `ckpt dump` and a
 * `criu dump -L DIR` run by hand or by a container runtime take one path;
 * ckpt adds the options criu needs, the control socket for the plugin, and
 * a report read back from the images' record.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt.h"
#include "criu_record.h"

#define CRIU_ARGS_MAX 24

/* Run criu @argv with the plugin's settings in its environment; its exit
 * status, or -errno when it could not be started. */
static int criu_run(struct ckpt *c, char *const argv[])
{
	int status;
	pid_t pid = fork();

	if (pid < 0)
		return -errno;
	if (pid == 0) {
		char device[16];
		int null = open("/dev/null", O_RDWR | O_CLOEXEC);

		setenv("TERN_CONTROL", c->control, 1);
		if (c->incremental)
			setenv("TERN_CRIU_INCREMENTAL", "1", 1);
		if (c->device >= 0) {
			snprintf(device, sizeof(device), "%d", c->device);
			setenv("TERN_CRIU_DEVICE", device, 1);
		}
		/* criu's own words go to its log; ckpt's stdout is its report. */
		if (null >= 0)
			dup2(null, STDIN_FILENO);
		dup2(STDERR_FILENO, STDOUT_FILENO);
		execv(argv[0], argv);
		fprintf(stderr, "ckpt: cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* criu @verb with the images folder, tern's plugins and a verbose log in
 * the images folder; the number of words put in @argv. */
static unsigned criu_argv(struct ckpt *c, const char *verb, char *log, char *argv[CRIU_ARGS_MAX])
{
	unsigned n = 0;

	argv[n++] = (char *)c->criu;
	argv[n++] = (char *)verb;
	argv[n++] = "-D";
	argv[n++] = (char *)c->images;
	argv[n++] = "-L";
	argv[n++] = (char *)c->criu_plugins;
	argv[n++] = "-o";
	argv[n++] = log;
	argv[n++] = "-v4";
	return n;
}

/* The first error lines of criu's log, for the failure message. */
static void log_errors(const char *path, char *out, size_t cap)
{
	char line[1024];
	size_t used = 0;
	FILE *f = fopen(path, "re");

	out[0] = 0;
	if (!f)
		return;
	while (used + 1 < cap && fgets(line, sizeof(line), f)) {
		if (!strstr(line, "Error") && !strstr(line, "tern_criu: "))
			continue;
		line[strcspn(line, "\n")] = 0;
		used += (size_t)snprintf(out + used, cap - used, "%s%s", used ? "; " : "", line);
	}
	fclose(f);
	if (used >= cap)
		out[cap - 1] = 0;
}

/* criu changes its working directory: give it absolute paths. */
static int path_absolute(struct ckpt *c, const char **path, char *buf, const char *what)
{
	if (!realpath(*path, buf))
		return ckpt_fail(c, CKPT_EXIT_FAILED, "%s %s: %s", what, *path, strerror(errno));
	*path = buf;
	return 0;
}

static int criu_check_usable(struct ckpt *c)
{
	static char plugins[PATH_MAX];
	struct stat st;

	if (stat(c->criu, &st) || !(st.st_mode & S_IXUSR))
		return ckpt_fail(c, CKPT_EXIT_FAILED, "no criu at %s: run tools/criu-fetch, or pass --criu PATH "
				 "(criu 4.x; docs/criu.md)", c->criu);
	if (faccessat(AT_FDCWD, c->criu_plugins, R_OK, 0))
		return ckpt_fail(c, CKPT_EXIT_FAILED, "no plugin folder %s: pass --criu-plugins DIR "
				 "(the folder of tern_criu.so)", c->criu_plugins);
	return path_absolute(c, &c->criu_plugins, plugins, "plugin folder");
}

static void record_json(struct json_writer *w, const struct criu_record *r)
{
	json_u64_put(w, "pid", r->pid);
	json_array_begin(w, "sessions");
	for (uint32_t i = 0; i < r->count; i++) {
		json_object_begin(w, NULL);
		json_string_put(w, "session", r->entries[i].session);
		json_string_put(w, "snapshot", r->entries[i].snapshot);
		json_u64_put(w, "seq", r->entries[i].seq);
		json_object_end(w);
	}
	json_array_end(w);
}

static void record_print(const struct criu_record *r, const char *verb)
{
	for (uint32_t i = 0; i < r->count; i++)
		printf("  session %s: %s '%s' (request %llu)\n", r->entries[i].session, verb,
		       r->entries[i].snapshot, (unsigned long long)r->entries[i].seq);
}

/* Read the images' record: 0, 1 when there is none, or a reported failure. */
static int record_load(struct ckpt *c, int dir, struct criu_record *r)
{
	char err[256];
	int rc = criu_record_read(dir, r, err, sizeof(err));

	if (rc == -ENOENT)
		return 1;
	if (rc)
		return ckpt_fail(c, CKPT_EXIT_FAILED, "%s/%s: %s", c->images, CRIU_RECORD_FILE,
				 rc == -EBADMSG ? err : strerror(-rc));
	return 0;
}

int cmd_dump(struct ckpt *c)
{
	char pid[16], log[64] = "dump.log", logpath[PATH_MAX + 64], errors[1536], images[PATH_MAX];
	char *argv[CRIU_ARGS_MAX] = { 0 };
	struct criu_record r;
	struct stat st;
	struct json_writer w;
	unsigned n;
	int rc, dir;

	if (!c->pid || !c->images)
		return ckpt_fail(c, CKPT_EXIT_USAGE, "dump takes --pid PID and --images DIR");
	if (kill(c->pid, 0) && errno == ESRCH)
		return ckpt_fail(c, CKPT_EXIT_FAILED, "no process %d", c->pid);
	rc = criu_check_usable(c);
	if (rc)
		return rc;
	if (mkdir(c->images, 0700) && errno != EEXIST)
		return ckpt_fail(c, CKPT_EXIT_FAILED, "cannot make %s: %s", c->images, strerror(errno));
	rc = path_absolute(c, &c->images, images, "images folder");
	if (rc)
		return rc;
	dir = open(c->images, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0)
		return ckpt_fail(c, CKPT_EXIT_FAILED, "cannot open %s: %s", c->images, strerror(errno));
	/* criu writes its images 0644: only the folder keeps the process's
	 * memory, its session credential included, from other users. */
	if (!fstat(dir, &st) && (st.st_mode & 077))
		fprintf(stderr, "ckpt: warning: %s is open to other users (mode %03o); the images will hold the "
			"process's memory, its session credential included: chmod 700 it\n", c->images,
			(unsigned)(st.st_mode & 0777));
	/* A record left by an earlier dump must not pass for this one's. */
	unlinkat(dir, CRIU_RECORD_FILE, 0);
	snprintf(pid, sizeof(pid), "%d", c->pid);
	n = criu_argv(c, "dump", log, argv);
	argv[n++] = "-t";
	argv[n++] = pid;
	if (c->leave_running)
		argv[n++] = "--leave-running";
	rc = criu_run(c, argv);
	snprintf(logpath, sizeof(logpath), "%s/%s", c->images, log);
	if (rc) {
		log_errors(logpath, errors, sizeof(errors));
		close(dir);
		return ckpt_fail(c, CKPT_EXIT_FAILED, "criu dump of process %d failed (%d); the process goes on. "
				 "%s (log: %s)", c->pid, rc, errors[0] ? errors : "", logpath);
	}
	rc = record_load(c, dir, &r);
	close(dir);
	if (rc == 1)
		memset(&r, 0, sizeof(r));       /* a process without sessions: CRIU alone */
	else if (rc)
		return rc;
	if (c->json) {
		ckpt_json_begin(c, &w);
		json_bool_put(&w, "ok", true);
		json_string_put(&w, "images", c->images);
		json_bool_put(&w, "leave_running", c->leave_running);
		record_json(&w, &r);
		ckpt_json_end(c, &w);
	} else {
		printf("dumped process %d into %s%s\n", c->pid, c->images, c->leave_running ? " (left running)" : "");
		record_print(&r, "snapshot");
	}
	return CKPT_EXIT_OK;
}

int cmd_restore_process(struct ckpt *c)
{
	char log[64] = "restore.log", logpath[PATH_MAX + 64], errors[1536], images[PATH_MAX];
	char *argv[CRIU_ARGS_MAX] = { 0 };
	struct criu_record r;
	struct json_writer w;
	unsigned n;
	int rc, dir;

	rc = criu_check_usable(c);
	if (rc)
		return rc;
	dir = open(c->images, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0)
		return ckpt_fail(c, CKPT_EXIT_FAILED, "cannot open %s: %s", c->images, strerror(errno));
	rc = path_absolute(c, &c->images, images, "images folder");
	if (rc) {
		close(dir);
		return rc;
	}
	/* Refuse a damaged record before criu starts anything. */
	rc = record_load(c, dir, &r);
	close(dir);
	if (rc == 1)
		memset(&r, 0, sizeof(r));
	else if (rc)
		return rc;
	n = criu_argv(c, "restore", log, argv);
	argv[n++] = "--restore-detached";
	rc = criu_run(c, argv);
	snprintf(logpath, sizeof(logpath), "%s/%s", c->images, log);
	log_errors(logpath, errors, sizeof(errors));
	if (rc)
		return ckpt_fail(c, CKPT_EXIT_FAILED, "criu restore from %s failed (%d). %s (log: %s)", c->images,
				 rc, errors[0] ? errors : "", logpath);
	/* The plugin waited for ternd's answer to each restore and logged it. */
	if (strstr(errors, "restore of"))
		return ckpt_fail(c, CKPT_EXIT_FAILED, "the process is back but a session was not: %s (log: %s)",
				 errors, logpath);
	if (c->json) {
		ckpt_json_begin(c, &w);
		json_bool_put(&w, "ok", true);
		json_string_put(&w, "images", c->images);
		record_json(&w, &r);
		ckpt_json_end(c, &w);
	} else {
		printf("restored process %u from %s\n", r.pid, c->images);
		record_print(&r, "restored from");
	}
	return CKPT_EXIT_OK;
}
