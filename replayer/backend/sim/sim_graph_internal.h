/* What sim_graph.c (graphs, their nodes and parameters) and
 * sim_graph_exec.c (executable graphs, conditional nodes, launches, updates)
 * share. Private to the sim backend.
 */
#ifndef TERN_SIM_GRAPH_INTERNAL_H
#define TERN_SIM_GRAPH_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sim.h"
#include "graph_desc.h"
#include "log.h"

/* A checked memcpy node: where each side starts and how far it reaches. */
struct copy_geom {
	uintptr_t src, dst;
	size_t src_span, dst_span;
};

void sim_graph_cond_unref(struct sim *sim, struct sim_cond *c);
bool sim_graph_has_cond(const struct sim_graph *g);
void sim_event_unref(struct sim_event *ev);
void sim_graph_gnode_params_release(struct sim *sim, struct sim_gnode *n);
void sim_graph_gnode_drop_last(struct sim *sim, struct sim_graph *g);
int sim_graph_gnode_params_copy(struct sim *sim, struct sim_gnode *dst, const struct sim_gnode *src);
CUresult sim_graph_resolve(struct sim *sim, CUgraph h, struct sim_graph **out);
CUresult sim_graph_node_resolve(struct sim *sim, CUgraphNode h, struct sim_gnode **out);
CUresult sim_graph_exec_resolve(struct sim *sim, CUgraphExec h, struct sim_exec **out);
CUresult sim_graph_deps_check(struct sim *sim, struct sim_graph *g, const CUgraphNode *deps, size_t n);
CUresult sim_graph_enter_add(CUgraphNode *ph, CUgraph hg, const CUgraphNode *deps, size_t n,
			  struct sim **psim, struct sim_graph **pg);
CUresult sim_graph_enter_node(CUgraphNode h, int type, struct sim **psim, struct sim_gnode **pn);
CUresult sim_graph_node_append(struct sim_graph *g, CUgraphNodeType type, const CUgraphNode *deps, size_t ndeps,
			    CUgraphNode *ph, struct sim_gnode **out);
CUresult sim_graph_kernel_params_set(struct sim *sim, struct sim_gnode *n, const CUDA_KERNEL_NODE_PARAMS *p);
CUresult sim_graph_copy_check(struct sim *sim, const CUDA_MEMCPY3D *p, struct copy_geom *g);
CUresult sim_graph_memset_check(struct sim *sim, const CUDA_MEMSET_NODE_PARAMS *p);

#endif
