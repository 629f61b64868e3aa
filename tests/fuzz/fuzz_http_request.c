/* Fuzz target for ternd's HTTP request reader (replayer/daemon/http_request.h):
 * any bytes a client of --metrics-listen could send. Beside not crashing, it
 * checks what the header promises: a whole head is read the same whatever
 * follows it, each of its prefixes is "more" (-EAGAIN), a refusal is one of
 * the listed statuses and a prefix gives it or "more", and what it fills in
 * is sane. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http_request.h"

static int parse_copy(const uint8_t *data, size_t size, struct http_request *req)
{
	/* An exact-size copy: ASan sees any byte read past @size. */
	char *copy = malloc(size ? size : 1);
	int ret;

	if (!copy)
		abort();
	memcpy(copy, data, size);
	ret = http_request_parse(copy, size, req);
	free(copy);
	return ret;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct http_request req, again;
	int ret = parse_copy(data, size, &req), pre;

	if (ret == -EAGAIN) {
		if (size >= HTTP_HEAD_MAX)
			abort();
		return 0;
	}
	if (ret != 0 && ret != 400 && ret != 413 && ret != 414 && ret != 431 && ret != 505)
		abort();
	/* Some prefix: "more", or the same answer. */
	pre = parse_copy(data, size / 2, &again);
	if (pre != -EAGAIN && pre != ret)
		abort();
	if (ret)
		return 0;
	if (req.head_len < 16 || req.head_len > size || req.head_len > HTTP_HEAD_MAX ||
	    memcmp(data + req.head_len - 4, "\r\n\r\n", 4) || req.path[0] != '/' ||
	    strlen(req.path) > HTTP_TARGET_MAX || !req.method_text[0] ||
	    strlen(req.method_text) > HTTP_METHOD_MAX || req.version_minor > 1 || req.headers > HTTP_HEADERS_MAX ||
	    (req.method == HTTP_METHOD_GET) != !strcmp(req.method_text, "GET"))
		abort();
	/* The head alone reads the same; one byte less is not whole. */
	if (parse_copy(data, req.head_len, &again) || again.head_len != req.head_len ||
	    strcmp(again.path, req.path) || strcmp(again.method_text, req.method_text) ||
	    parse_copy(data, req.head_len - 1, &again) != -EAGAIN)
		abort();
	return 0;
}
