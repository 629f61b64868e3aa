/* A strict reader of one HTTP/1.0 or HTTP/1.1 request head (RFC 9112), for
 * ternd's metrics endpoint (metrics_http.h). What a client sends is hostile:
 * every byte is checked, nothing is sized by the client, and what is not
 * plainly right is refused rather than guessed at.
 *
 *   request-line = method SP origin-form SP "HTTP/1." ("0" / "1") CRLF
 *   header-field = field-name ":" OWS field-value OWS CRLF
 *   head         = request-line *( header-field ) CRLF
 *
 * Refused: a bare LF or CR, obs-fold (a line that starts with a space),
 * white space before a header's colon, control bytes in a value, a method or
 * field name that is not a token, a target that is not origin-form ("/..."
 * in visible ASCII), more than one Host or none in HTTP/1.1, a
 * Content-Length that is not one decimal number, Transfer-Encoding beside
 * Content-Length. The endpoint takes no request body: a Content-Length
 * over 0, or any Transfer-Encoding, is "too large" (413).
 *
 * Pure: no allocation, no I/O; any thread, re-entrant.
 */
#ifndef TERN_HTTP_REQUEST_H
#define TERN_HTTP_REQUEST_H

#include <stddef.h>

/* A whole head at most (the request line among it): more is 431. A target
 * longer than HTTP_TARGET_MAX is 414, a method longer than HTTP_METHOD_MAX
 * 400. */
#define HTTP_HEAD_MAX 8192
#define HTTP_METHOD_MAX 16
#define HTTP_TARGET_MAX 2048
#define HTTP_HEADERS_MAX 64

enum http_method {
	HTTP_METHOD_OTHER,      /* a well-formed token: answered 405 */
	HTTP_METHOD_GET,
	HTTP_METHOD_HEAD,
};

struct http_request {
	enum http_method method;
	char method_text[HTTP_METHOD_MAX + 1];
	char path[HTTP_TARGET_MAX + 1];         /* the target up to any '?' */
	unsigned version_minor;                 /* HTTP/1.0 or HTTP/1.1 */
	unsigned headers;                       /* header fields read */
	size_t head_len;                        /* bytes of the head, its final CRLF CRLF included */
};

/* Read the head at the start of @buf (@len bytes, not NUL-terminated; bytes
 * after the head are not looked at). Returns:
 *   0            a whole head, well-formed: @req is filled
 *   -EAGAIN      nothing wrong yet, and the head is not whole
 * or the status to answer with, as a positive number: 400 (malformed), 414
 * (request line too long), 431 (head too long, or too many fields), 413 (a
 * body), 505 (an HTTP version other than 1.0 and 1.1). @req is then
 * undefined. A prefix of a whole head gives -EAGAIN, and a head followed by
 * anything gives the same as the head alone. */
int http_request_parse(const char *buf, size_t len, struct http_request *req);

#endif
