/* Timing shared by bench/overhead's CUDA programs (overhead.cu,
 * overhead_sgemm.cu): wall time with clock_gettime, one warm-up repetition,
 * the median of the timed ones, printed as the line bench/overhead parses:
 *
 *   RESULT <metric> <unit> <median> <rep1>,<rep2>,...
 */
#ifndef TERN_BENCH_OVERHEAD_H
#define TERN_BENCH_OVERHEAD_H

#include "check.h"

#include <algorithm>
#include <time.h>
#include <vector>

static inline double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Runs rep(0) as the warm-up and rep(1..reps) timed; each returns the
 * repetition's value in @unit. Prints the RESULT line. */
template <typename F> static inline void measure(const char *metric, const char *unit, int reps, F rep)
{
	std::vector<double> v;

	rep(0);
	for (int r = 1; r <= reps; r++)
		v.push_back(rep(r));
	std::vector<double> s = v;
	std::sort(s.begin(), s.end());
	double med = s.size() % 2 ? s[s.size() / 2] : (s[s.size() / 2 - 1] + s[s.size() / 2]) / 2;
	printf("RESULT %s %s %.6g ", metric, unit, med);
	for (size_t i = 0; i < v.size(); i++)
		printf("%s%.6g", i ? "," : "", v[i]);
	printf("\n");
	fflush(stdout);
}

static inline double us_per(double t0, long n)
{
	return (now() - t0) / (double)n * 1e6;
}

#endif
