/* Runs a libFuzzer target without libFuzzer: every file of the seed corpus,
 * then N inputs made by flipping, truncating and splicing those seeds with a
 * fixed-seed generator, so a CI run is repeatable.
 *
 *     fuzz_X_regress CORPUS_DIR [N]
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_SEEDS 1024
#define FUZZ_INPUT_MAX (1u << 20)

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static uint8_t *file_read(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf;

	if (!f)
		return NULL;
	buf = malloc(FUZZ_INPUT_MAX);
	*size = buf ? fread(buf, 1, FUZZ_INPUT_MAX, f) : 0;
	fclose(f);
	return buf;
}

static void input_mutate(uint8_t *buf, size_t *size, const uint8_t *other, size_t other_size)
{
	unsigned rounds = 1 + rng_next() % 8;

	while (rounds--) {
		switch (rng_next() % 5) {
		case 0: /* flip a byte */
			if (*size)
				buf[rng_next() % *size] ^= (uint8_t)(1u << (rng_next() % 8));
			break;
		case 1: /* truncate */
			if (*size)
				*size = rng_next() % *size;
			break;
		case 2: /* overwrite with an interesting value */
			if (*size >= 4) {
				static const uint32_t vals[] = {0, 1, 0x7fffffff, 0x80000000, 0xffffffff, 0xfffffff0};
				uint32_t v = vals[rng_next() % 6];
				memcpy(buf + rng_next() % (*size - 3), &v, 4);
			}
			break;
		case 3: /* splice the tail of another seed */
			if (other_size && *size) {
				size_t at = rng_next() % *size, from = rng_next() % other_size;
				size_t n = other_size - from;
				if (at + n > FUZZ_INPUT_MAX)
					n = FUZZ_INPUT_MAX - at;
				memcpy(buf + at, other + from, n);
				*size = at + n;
			}
			break;
		case 4: /* grow with random bytes */
			if (*size + 64 <= FUZZ_INPUT_MAX) {
				for (int i = 0; i < 64; i++)
					buf[(*size)++] = (uint8_t)rng_next();
			}
			break;
		}
	}
}

int main(int argc, char **argv)
{
	uint8_t *seeds[MAX_SEEDS], *work;
	size_t seed_size[MAX_SEEDS];
	unsigned nseeds = 0;
	unsigned long iterations = argc > 2 ? strtoul(argv[2], NULL, 10) : 10000;
	DIR *dir = argc > 1 ? opendir(argv[1]) : NULL;
	struct dirent *de;
	char path[4096];

	while (dir && (de = readdir(dir))) {
		if (de->d_name[0] == '.')
			continue;
		/* A seed left out silently would be a seed CI never runs. */
		if (nseeds == MAX_SEEDS) {
			fprintf(stderr, "%s: more than %u seeds\n", argv[1], MAX_SEEDS);
			return 1;
		}
		snprintf(path, sizeof(path), "%s/%s", argv[1], de->d_name);
		seeds[nseeds] = file_read(path, &seed_size[nseeds]);
		if (seeds[nseeds]) {
			LLVMFuzzerTestOneInput(seeds[nseeds], seed_size[nseeds]);
			nseeds++;
		}
	}
	if (dir)
		closedir(dir);
	if (!nseeds) {
		seeds[0] = calloc(1, 64);
		seed_size[0] = 64;
		nseeds = 1;
	}
	work = malloc(FUZZ_INPUT_MAX);
	if (!work)
		return 1;
	for (unsigned long i = 0; i < iterations; i++) {
		unsigned a = rng_next() % nseeds, b = rng_next() % nseeds;
		size_t size = seed_size[a];

		memcpy(work, seeds[a], size);
		input_mutate(work, &size, seeds[b], seed_size[b]);
		LLVMFuzzerTestOneInput(work, size);
	}
	printf("%lu inputs over %u seeds: no crash\n", iterations, nseeds);
	free(work);
	for (unsigned i = 0; i < nseeds; i++)
		free(seeds[i]);
	return 0;
}
