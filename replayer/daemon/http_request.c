#include "http_request.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

/* RFC 9110's tchar: what a method and a field name are made of. */
static bool tchar(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* A field value's bytes: VCHAR, obs-text, SP and HTAB. */
static bool value_char(unsigned char c)
{
	return c == ' ' || c == '\t' || (c >= 0x21 && c != 0x7f);
}

enum state {
	S_METHOD,
	S_TARGET_FIRST,
	S_TARGET,
	S_VERSION,              /* the k-th byte of "HTTP/d.d\r\n" */
	S_LINE_START,           /* a field, or the head's final CRLF */
	S_NAME,
	S_VALUE,
	S_VALUE_LF,             /* a CR ended the value: LF must follow */
	S_END_LF,               /* the head's final CR: LF must follow */
};

/* What the fields said, judged once the head is whole. */
struct fields {
	unsigned hosts;
	bool length_seen, length_nonzero, chunked;
};

/* One whole field, name [@n0, @n1), value [@v0, @v1) before trimming. 0 or
 * 400. */
static int field_end(const char *buf, size_t n0, size_t n1, size_t v0, size_t v1, struct fields *f)
{
	size_t nlen = n1 - n0;

	while (v0 < v1 && (buf[v0] == ' ' || buf[v0] == '\t'))
		v0++;
	while (v1 > v0 && (buf[v1 - 1] == ' ' || buf[v1 - 1] == '\t'))
		v1--;
	if (nlen == 4 && !strncasecmp(buf + n0, "host", 4)) {
		f->hosts++;
		return 0;
	}
	if (nlen == 17 && !strncasecmp(buf + n0, "transfer-encoding", 17)) {
		f->chunked = true;      /* any coding at all: a body follows */
		return 0;
	}
	if (nlen == 14 && !strncasecmp(buf + n0, "content-length", 14)) {
		/* One field of 1*DIGIT; a list ("5, 5") or a second field is
		 * refused, as a proxy might read either. */
		if (f->length_seen || v0 == v1)
			return 400;
		for (size_t i = v0; i < v1; i++) {
			if (buf[i] < '0' || buf[i] > '9')
				return 400;
			f->length_nonzero |= buf[i] != '0';
		}
		f->length_seen = true;
	}
	return 0;
}

static int head_end(const struct http_request *req, const struct fields *f)
{
	if (f->chunked && f->length_seen)
		return 400;
	if (req->version_minor == 1 ? f->hosts != 1 : f->hosts > 1)
		return 400;
	if (f->chunked || f->length_nonzero)
		return 413;
	return 0;
}

int http_request_parse(const char *buf, size_t len, struct http_request *req)
{
	static const char version[] = "HTTP/d.d\r\n";
	enum state st = S_METHOD;
	struct fields f = { 0 };
	size_t start = 0, n0 = 0, n1 = 0, v0 = 0, k = 0, plen = 0;
	char major = 0, minor = 0;

	memset(req, 0, sizeof(*req));
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)buf[i];

		/* The request line is bounded below (414), well within this. */
		if (i >= HTTP_HEAD_MAX)
			return 431;
		switch (st) {
		case S_METHOD:
			if (c == ' ' && i > 0) {
				memcpy(req->method_text, buf, i);
				req->method_text[i] = 0;
				st = S_TARGET_FIRST;
			} else if (!tchar(c) || i >= HTTP_METHOD_MAX) {
				return 400;
			}
			break;
		case S_TARGET_FIRST:
			if (c != '/')
				return 400;     /* origin-form only: no "*", no absolute URI */
			start = i;
			st = S_TARGET;
			/* fall through */
		case S_TARGET:
			if (c == ' ') {
				if (!plen)
					plen = i - start;
				memcpy(req->path, buf + start, plen);
				req->path[plen] = 0;
				st = S_VERSION;
				k = 0;
			} else if (c < 0x21 || c > 0x7e) {
				return 400;
			} else if (i - start >= HTTP_TARGET_MAX) {
				return 414;
			} else if (c == '?' && !plen) {
				plen = i - start;
			}
			break;
		case S_VERSION:
			if (version[k] == 'd') {
				if (c < '0' || c > '9')
					return 400;
				*(k == 5 ? &major : &minor) = (char)c;
			} else if (c != (unsigned char)version[k]) {
				return 400;
			}
			if (++k == sizeof(version) - 1) {
				if (major != '1' || (minor != '0' && minor != '1'))
					return 505;
				req->version_minor = (unsigned)(minor - '0');
				st = S_LINE_START;
			}
			break;
		case S_LINE_START:
			if (c == '\r') {
				st = S_END_LF;
			} else if (tchar(c)) {
				if (++req->headers > HTTP_HEADERS_MAX)
					return 431;
				n0 = i;
				st = S_NAME;
			} else {
				return 400;     /* obs-fold, an empty name, or a stray byte */
			}
			break;
		case S_NAME:
			if (c == ':') {
				n1 = i;
				v0 = i + 1;
				st = S_VALUE;
			} else if (!tchar(c)) {
				return 400;     /* white space before the colon among them */
			}
			break;
		case S_VALUE:
			if (c == '\r') {
				int ret = field_end(buf, n0, n1, v0, i, &f);

				if (ret)
					return ret;
				st = S_VALUE_LF;
			} else if (!value_char(c)) {
				return 400;
			}
			break;
		case S_VALUE_LF:
			if (c != '\n')
				return 400;
			st = S_LINE_START;
			break;
		case S_END_LF: {
			int ret;

			if (c != '\n')
				return 400;
			ret = head_end(req, &f);
			if (ret)
				return ret;
			req->method = !strcmp(req->method_text, "GET") ? HTTP_METHOD_GET :
				      !strcmp(req->method_text, "HEAD") ? HTTP_METHOD_HEAD : HTTP_METHOD_OTHER;
			req->head_len = i + 1;
			return 0;
		}
		}
	}
	return len >= HTTP_HEAD_MAX ? 431 : -EAGAIN;
}
