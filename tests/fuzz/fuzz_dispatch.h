/* What the dispatch fuzz target (fuzz_dispatch.c) tells a program that
 * links it besides libFuzzer: the seed check (fuzz_dispatch_seeds.c). */
#ifndef TERN_FUZZ_DISPATCH_H
#define TERN_FUZZ_DISPATCH_H

#include <stdint.h>

#include <cuda.h>

/* Called once per request record of an input, after its dispatch: @ret is
 * wire_dispatch()'s (0: the request decoded and its handler ran, -EPROTO,
 * -ENOSYS; 1 when the context could not be made current and nothing was
 * dispatched), @res the handler's CUresult when @ret is 0. */
typedef void (*fuzz_dispatch_observer)(uint32_t call, int ret, CUresult res, void *arg);

/* Install @fn (NULL: none) for the inputs that follow. Not thread-safe, like
 * the target. */
void fuzz_dispatch_observe(fuzz_dispatch_observer fn, void *arg);

#endif
