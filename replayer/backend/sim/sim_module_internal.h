/* What sim_module.c (modules, libraries, functions) and sim_launch.c
 * (launches, faults inside CPU kernels, occupancy) share. Private to the
 * sim backend.
 */
#ifndef TERN_SIM_MODULE_INTERNAL_H
#define TERN_SIM_MODULE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sim.h"
#include "fatbin.h"
#include "log.h"
#define SIM_TARGET_SM 90
#define SIM_EXTRA_MAX 64            /* key/value pairs read from `extra` */

CUresult sim_func_resolve(struct sim *sim, const void *h, struct sim_func **out);
CUresult sim_enter_func(const void *h, struct sim **psim, struct sim_func **pf);

#endif
