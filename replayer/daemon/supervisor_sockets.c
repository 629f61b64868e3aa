/* The supervisor's listening sockets: the guests' listeners, the control
 * socket and the metrics endpoint, each bound here or, with socket
 * activation, passed by the service manager (service_sockets.h); and their
 * end, which leaves a passed socket to the manager that made it. */
#define LOG_PREFIX "supervisor: "
#include "supervisor_internal.h"
#include "log.h"
#include "metrics_http.h"
#include "service_sockets.h"
#include "transport.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Bind @url's socket with exactly @mode (and the group @gid when @group),
 * whatever the umask: the file is made owner-only by the bind and widened
 * after. */
int socket_listen_group(const struct transport_url *url, mode_t mode, bool group, gid_t gid)
{
	mode_t old = umask(0177);
	int fd = transport_listen(url), ret;

	umask(old);
	if (fd < 0 || (url->kind != TRANSPORT_UNIX && url->kind != TRANSPORT_SHM))
		return fd;
	ret = socket_mode_set(url->path, mode, group, gid);
	if (ret) {
		close(fd);
		return ret;
	}
	return fd;
}

int socket_mode_set(const char *path, mode_t mode, bool group, gid_t gid)
{
	if ((group && chown(path, (uid_t)-1, gid)) || chmod(path, mode))
		return -errno;
	return 0;
}

int socket_listen(const struct supervisor_config *cfg, const struct transport_url *url, mode_t mode)
{
	return socket_listen_group(url, mode, cfg->socket_group_set, cfg->socket_group);
}

static mode_t control_mode(const struct supervisor_config *cfg)
{
	return cfg->socket_group_set ? 0660 : 0600;
}

/* Claim the passed socket bound at @path as @kind into *fd, with the mode
 * ternd would have given it: 0, -ENOENT when none was passed for it, or
 * another -errno with the reason in @err. */
static int passed_claim(struct supervisor *sv, const char *path, enum service_socket_role kind, mode_t mode,
			int *fd, char *err, size_t err_len)
{
	const struct supervisor_config *cfg = sv->cfg;
	int got = service_sockets_claim(&sv->cfg->passed, path, kind, err, err_len), ret;

	if (got < 0)
		return got;
	*fd = got;
	ret = socket_mode_set(path, mode, cfg->socket_group_set, cfg->socket_group);
	if (ret)
		snprintf(err, err_len, "cannot set the mode of %s: %s", path, strerror(-ret));
	return ret;
}

/* The sockets the service manager passed to the guest listeners and the
 * control socket they are bound for; one that fits none stops ternd.
 * 0 or -1 (said). */
static int passed_sockets_claim(struct supervisor *sv)
{
	const struct supervisor_config *cfg = sv->cfg;
	char err[512];
	int ret;

	for (unsigned i = 0; i < cfg->listen_count; i++) {
		if (cfg->listen[i].kind != TRANSPORT_UNIX && cfg->listen[i].kind != TRANSPORT_SHM)
			continue;
		ret = passed_claim(sv, cfg->listen[i].path, SERVICE_SOCKET_LISTEN, 0660, &sv->listen_fd[i], err,
				   sizeof(err));
		if (ret == -ENOENT)
			continue;
		sv->listen_passed[i] = sv->listen_fd[i] >= 0;
		if (ret)
			goto fail;
	}
	ret = passed_claim(sv, cfg->control_path, SERVICE_SOCKET_CONTROL, control_mode(cfg), &sv->control_fd, err,
			   sizeof(err));
	if (ret != -ENOENT) {
		sv->control_passed = sv->control_fd >= 0;
		if (ret)
			goto fail;
	}
	if (!service_sockets_unclaimed(&sv->cfg->passed, err, sizeof(err)))
		return 0;
fail:
	pr_err("socket activation: %s: ternd does not start", err);
	return -1;
}

int supervisor_sockets_open(struct supervisor *sv)
{
	struct supervisor_config *cfg = sv->cfg;
	struct transport_url control_url = { .kind = TRANSPORT_UNIX };
	char text[300], err[512];

	if (passed_sockets_claim(sv))
		return -1;
	for (unsigned i = 0; i < cfg->listen_count; i++) {
		transport_url_format(&cfg->listen[i], text, sizeof(text));
		if (transport_url_needs_token(&cfg->listen[i]) && !cfg->token.len)
			pr_warn("%s needs a token (--token-file): every guest will be refused", text);
		if (sv->listen_passed[i]) {
			pr_info("listening on %s (the service manager's socket)", text);
			continue;
		}
		sv->listen_fd[i] = socket_listen(cfg, &cfg->listen[i], 0660);
		if (sv->listen_fd[i] < 0) {
			pr_err("cannot listen on %s: %s", text, strerror(-sv->listen_fd[i]));
			return -1;
		}
		pr_info("listening on %s", text);
	}
	if (migrate_listen_open(sv))
		return -1;
	if (!sv->control_passed) {
		snprintf(control_url.path, sizeof(control_url.path), "%s", cfg->control_path);
		sv->control_fd = socket_listen(cfg, &control_url, control_mode(cfg));
	}
	if (sv->control_fd < 0) {
		pr_err("cannot listen on the control socket %s: %s", cfg->control_path, strerror(-sv->control_fd));
		return -1;
	}
	if (cfg->metrics_listen_set) {
		transport_url_format(&cfg->metrics_listen, text, sizeof(text));
		if (metrics_http_open(&cfg->metrics_listen, cfg->metrics_public, metrics_body, sv, &sv->metrics, err,
				      sizeof(err))) {
			pr_err("cannot serve the metrics on %s: %s", text, err);
			return -1;
		}
		pr_info("metrics on http://%s/metrics", text + strlen("tcp://"));
	}
	return 0;
}

void supervisor_sockets_close(struct supervisor *sv)
{
	const struct supervisor_config *cfg = sv->cfg;

	service_sockets_release(&sv->cfg->passed);
	/* A socket the service manager made stays its to remove: it listens
	 * on for the next ternd. */
	for (unsigned i = 0; i < cfg->listen_count; i++) {
		if (sv->listen_fd[i] < 0)
			continue;
		close(sv->listen_fd[i]);
		if (cfg->listen[i].kind == TRANSPORT_UNIX && !sv->listen_passed[i])
			unlink(cfg->listen[i].path);
	}
	if (sv->control_fd >= 0) {
		close(sv->control_fd);
		if (!sv->control_passed)
			unlink(cfg->control_path);
	}
	metrics_http_close(sv->metrics);
}
