/* The dispatch fuzz target's seeds cover the table: every call id that
 * calls.tbl defines must have a seed in the corpus whose request decodes
 * (its handler runs; what the handler answers is counted, not required).
 * Seeds named call-<id>-<name> (tools/fuzz-seeds) must name a call of the
 * table by its id. Fails with the calls that have none: rerun
 * tools/fuzz-seeds.
 *
 *     fuzz_dispatch_seeds CORPUS_DIR
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_dispatch.h"
#include "wire_calls.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct seen {
	unsigned decoded[WIRE_CALL_ID_MAX + 1];
	unsigned succeeded[WIRE_CALL_ID_MAX + 1];
};

static void seen_note(uint32_t call, int ret, CUresult res, void *arg)
{
	struct seen *s = arg;

	if (call > WIRE_CALL_ID_MAX || ret != 0)
		return;
	s->decoded[call]++;
	if (res == CUDA_SUCCESS)
		s->succeeded[call]++;
}

/* A seed of tools/fuzz-seeds must still name a call of the table. */
static int seed_name_ok(const char *name)
{
	unsigned id;
	int at = 0;

	if (sscanf(name, "call-%u-%n", &id, &at) != 1 || !at)
		return 1;
	if (id <= WIRE_CALL_ID_MAX && wire_call_name(id) && !strcmp(name + at, wire_call_name(id)))
		return 1;
	fprintf(stderr, "seed %s names no call of calls.tbl\n", name);
	return 0;
}

static int seed_run(const char *dir, const char *name)
{
	char path[4096];
	uint8_t *buf = NULL;
	long size;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "rb");
	if (!f || fseek(f, 0, SEEK_END) || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) ||
	    !(buf = malloc((size_t)size + 1)) || fread(buf, 1, (size_t)size, f) != (size_t)size) {
		fprintf(stderr, "%s: cannot read\n", path);
		if (f)
			fclose(f);
		free(buf);
		return -1;
	}
	fclose(f);
	LLVMFuzzerTestOneInput(buf, (size_t)size);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	static struct seen s;
	struct dirent **names;
	unsigned calls = 0, missing = 0, ok = 0;
	int n, bad = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: fuzz_dispatch_seeds CORPUS_DIR\n");
		return 2;
	}
	n = scandir(argv[1], &names, NULL, alphasort);
	if (n < 0) {
		perror(argv[1]);
		return 1;
	}
	fuzz_dispatch_observe(seen_note, &s);
	for (int i = 0; i < n; i++) {
		if (names[i]->d_name[0] != '.') {
			bad |= !seed_name_ok(names[i]->d_name);
			bad |= seed_run(argv[1], names[i]->d_name) < 0;
		}
		free(names[i]);
	}
	free(names);
	/* The CUDA executor's calls: OpenCL's go to exec_opencl, not this harness. */
	for (uint32_t id = WIRE_API_CUDA_FIRST; id <= WIRE_API_CUDA_LAST && id <= WIRE_CALL_ID_MAX; id++) {
		if (!wire_call_name(id))
			continue;
		calls++;
		if (!s.decoded[id]) {
			fprintf(stderr, "call %u (%s): no seed whose request decodes\n", id, wire_call_name(id));
			missing++;
		} else if (s.succeeded[id]) {
			ok++;
		}
	}
	printf("%u calls: %u with a seed that decodes, %u answered CUDA_SUCCESS by a seed\n",
	       calls, calls - missing, ok);
	if (missing)
		fprintf(stderr, "rerun tools/fuzz-seeds to write the missing seeds\n");
	return missing || bad ? 1 : 0;
}
