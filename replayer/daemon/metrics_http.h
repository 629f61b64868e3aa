/* ternd's metrics over HTTP (--metrics-listen): GET /metrics answers the
 * text of `ternd metrics` (metrics_text.h), for a Prometheus server to
 * scrape. Served from the supervisor's poll loop, never blocking it: every
 * socket is nonblocking, each client has a deadline, and few are served at
 * once (docs/limits.md). One request a connection (Connection: close); the
 * request head is read by http_request.h's strict parser.
 *
 *   GET or HEAD /metrics   200, Content-Type METRICS_TEXT_CONTENT_TYPE
 *   another path           404
 *   another method         405 (Allow: GET, HEAD)
 *   a malformed head       400; too long 431 (414 the target); a body 413;
 *                          another HTTP version 505; too slow 408
 *   no room                503 (METRICS_HTTP_CLIENTS_MAX clients already)
 *
 * Only loopback addresses unless the option says public: (ternd.c); HTTP
 * here has no authentication, and the text names every session.
 *
 * Threading: the supervisor's thread only, like the rest of its state.
 */
#ifndef TERN_METRICS_HTTP_H
#define TERN_METRICS_HTTP_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>

#include "transport.h"

/* Clients served at once; one more is answered 503 and closed. */
#define METRICS_HTTP_CLIENTS_MAX 16
/* From accept to a whole request head (slow clients: 408). */
#define METRICS_HTTP_REQUEST_MS 5000
/* To take the whole answer (a reader that stops is dropped). */
#define METRICS_HTTP_SEND_MS 10000
/* After the answer, what the client still sends is read and dropped for
 * this long, so that its unread bytes do not reset the connection before it
 * has read the answer. */
#define METRICS_HTTP_LINGER_MS 1000
#define METRICS_HTTP_POLL_MAX (1 + METRICS_HTTP_CLIENTS_MAX)

/* Makes GET /metrics' body: *@text (malloc'd; the server frees it) of *@len
 * bytes. 0, or -errno (answered 500). */
typedef int (*metrics_http_body_fn)(void *opaque, char **text, size_t *len);

struct metrics_http;

/* Listen on @url (tcp://HOST:PORT); a bound address that is not loopback is
 * refused unless @public. 0 with *@out, or -errno with @err said (-EPERM:
 * not loopback). @body is called with @opaque for each GET or HEAD of
 * /metrics. */
int metrics_http_open(const struct transport_url *url, bool public, metrics_http_body_fn body, void *opaque,
		      struct metrics_http **out, char *err, size_t cap);

/* Add the fds to watch to @pfd from @n (at most METRICS_HTTP_POLL_MAX);
 * returns the new count, *@first the first added. */
unsigned metrics_http_poll_fill(struct metrics_http *m, struct pollfd *pfd, unsigned n, unsigned *first);
/* Serve what poll found in @pfd[@first, @end). */
void metrics_http_poll_handle(struct metrics_http *m, const struct pollfd *pfd, unsigned first, unsigned end);
/* Drop or answer (408) the clients past their deadline; the ms until the
 * next deadline, or -1. */
int metrics_http_expire(struct metrics_http *m);

/* In a forked child: close every socket, free nothing. NULL: nothing. */
void metrics_http_fds_close(struct metrics_http *m);
/* Close and free. NULL: nothing. */
void metrics_http_close(struct metrics_http *m);

#endif
