#include "ternd_client.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control.h"
#include "control_msg.h"
#include "metrics_text.h"
#include "units.h"

/* One request to the ternd on @control, its decoded answer in @r (released
 * by the caller) and its text in *@text (freed by the caller). */
static int ask(const char *control, enum control_op op, enum control_reply_kind want, struct control_reply *r,
	       char **text)
{
	struct control_request req = { .op = op, .device = -1 };
	char *line = NULL, err[256];
	size_t len = 0;
	int ret = control_request_encode(&req, &line, &len);

	*text = NULL;
	memset(r, 0, sizeof(*r));
	if (!ret) {
		line[len - 1] = 0;      /* control_request() ends the line */
		ret = control_request(control, line, 5000, text);
	}
	free(line);
	if (ret) {
		fprintf(stderr, "ternd: no ternd answers on %s (%s); is it running? start it with `ternd`\n",
			control, strerror(-ret));
		return 1;
	}
	ret = control_reply_decode(*text, strlen(*text), op, r, err, sizeof(err));
	if (ret || r->kind != want) {
		fprintf(stderr, "ternd: the ternd on %s %s: %s\n", control,
			ret ? "sent a malformed answer" : "refused", ret ? err : r->error);
		control_reply_release(r);
		free(*text);
		*text = NULL;
		return 1;
	}
	return 0;
}

int ternd_status_print(const char *control, bool json)
{
	struct control_reply r;
	char *text;

	if (ask(control, CONTROL_OP_STATUS, CONTROL_REPLY_STATUS, &r, &text))
		return 1;
	if (json) {
		fputs(text, stdout);
	} else {
		printf("%-32s %8s %6s %12s %10s %11s %s\n", "SESSION", "PID", "DEVICE", "MEMORY", "CALLS",
		       "ROUND_TRIPS", "STATE");
		for (uint32_t i = 0; i < r.status.session_count; i++) {
			const struct control_session_info *e = &r.status.sessions[i];
			char mem[32];

			units_size_format(e->memory, mem, sizeof(mem));
			printf("%-32s %8d %6d %12s %10llu %11llu %s\n", e->id, e->pid, e->device, mem,
			       (unsigned long long)e->calls, (unsigned long long)e->round_trips, e->state);
		}
	}
	control_reply_release(&r);
	free(text);
	return 0;
}

int ternd_metrics_print(const char *control)
{
	struct control_reply st, sn;
	char *text, *text2;
	int ret;

	if (ask(control, CONTROL_OP_STATUS, CONTROL_REPLY_STATUS, &st, &text))
		return 1;
	if (ask(control, CONTROL_OP_SNAPSHOTS, CONTROL_REPLY_SNAPSHOTS, &sn, &text2)) {
		control_reply_release(&st);
		free(text);
		return 1;
	}
	ret = metrics_text_write(stdout, &st.status, &sn.snapshots);
	if (ret)
		fprintf(stderr, "ternd: cannot write the metrics: %s\n", strerror(-ret));
	control_reply_release(&st);
	control_reply_release(&sn);
	free(text);
	free(text2);
	return ret ? 1 : 0;
}
