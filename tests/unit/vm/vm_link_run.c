/* Run a command whose CUDA calls go through the VM channel, without a VM:
 *
 *     vm_link_run TERN_AGENT -- CMD [ARG]...
 *
 * TERN_SERVER (unix:PATH, as tests/cuda/with-ternd sets it) is where ternd
 * listens. This starts a relay (vm_relay_serve) whose streams connect
 * there, and tern-agent --port-connect to the relay's socket, then runs CMD
 * with TERN_SERVER set to the agent's socket: every request and reply
 * crosses vmlink both ways. The result is CMD's status; the relay must end
 * with status 0 when told to.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"
#include "relay.h"
#include "transport.h"

static struct transport_url ternd_url;

static int ternd_open(void *opaque)
{
	return transport_connect(&ternd_url);
}

static pid_t spawn(char **argv, const char *server)
{
	pid_t pid = fork();

	if (pid)
		return pid;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (server)
		setenv("TERN_SERVER", server, 1);
	execvp(argv[0], argv);
	fprintf(stderr, "vm_link_run: %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

int main(int argc, char **argv)
{
	const char *server = getenv("TERN_SERVER");
	char dir[] = "/tmp/tern-vm-link-XXXXXX", relay_sock[96], agent_sock[96], url[112], agent_url[112];
	struct transport_url relay_url = { .kind = TRANSPORT_UNIX };
	int control[2], lfd, status, ret = 1;
	pid_t relay, agent, cmd;

	if (argc < 4 || strcmp(argv[2], "--")) {
		fprintf(stderr, "usage: vm_link_run TERN_AGENT -- CMD [ARG]...\n");
		return 2;
	}
	if (!server || transport_url_parse(server, &ternd_url) || ternd_url.kind != TRANSPORT_UNIX) {
		fprintf(stderr, "vm_link_run: TERN_SERVER must be unix:PATH\n");
		return 2;
	}
	if (!mkdtemp(dir))
		return 1;
	snprintf(relay_sock, sizeof(relay_sock), "%s/relay.sock", dir);
	snprintf(agent_sock, sizeof(agent_sock), "%s/agent.sock", dir);
	snprintf(relay_url.path, sizeof(relay_url.path), "%s", relay_sock);
	lfd = transport_listen(&relay_url);
	if (lfd < 0 || pipe2(control, O_CLOEXEC)) {
		fprintf(stderr, "vm_link_run: relay socket: %s\n", strerror(lfd < 0 ? -lfd : errno));
		return 1;
	}
	relay = fork();
	if (!relay) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		log_open("vm_relay", LOG_WARN, -1);
		close(control[1]);
		_exit(vm_relay_serve(lfd, ternd_open, NULL, control[0]) ? 1 : 0);
	}
	close(control[0]);
	snprintf(url, sizeof(url), "unix:%s", relay_sock);
	agent = spawn((char *[]){ argv[1], "--port-connect", url, "--listen", agent_sock, "--log-level", "warn",
				  NULL }, NULL);
	for (int i = 0; i < 250 && access(agent_sock, F_OK); i++)
		usleep(20000);
	snprintf(agent_url, sizeof(agent_url), "unix:%s", agent_sock);
	cmd = spawn(argv + 3, agent_url);
	if (waitpid(cmd, &status, 0) == cmd)
		ret = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	kill(agent, SIGTERM);
	waitpid(agent, NULL, 0);
	close(control[1]);
	if (waitpid(relay, &status, 0) != relay || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "vm_link_run: the relay did not end cleanly\n");
		ret = ret ? ret : 1;
	}
	unlink(relay_sock);
	unlink(agent_sock);
	rmdir(dir);
	return ret;
}
