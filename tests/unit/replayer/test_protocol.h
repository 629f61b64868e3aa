/* What the hostile-guest protocol tests share: the ternd they start, the
 * sessions they open and the calls they send (test_protocol.c), used by the
 * graph (test_protocol_graph.c) and device query (test_protocol_device.c)
 * cases.
 */
#ifndef TERN_TEST_PROTOCOL_H
#define TERN_TEST_PROTOCOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shm_chan.h"
#include "transport.h"
#include "array_desc.h"
#include "wire.h"
#include "wire_calls.h"


/* The guest socket of the ternd under test, and the current context sent
 * with its requests (0: none). */
extern char sock_url[128];
extern uint64_t sock_ctx;

/* A graph node index that names no dependency. */
#define NONE_DEP 0xfffffffeu

struct reply {
	struct wire_header h;
	uint32_t status;
	uint8_t payload[4096];
	uint32_t len;
};

int session_open(const char *url_text, const char *token, uint32_t *status);
/* A session with device 0's primary context current (sock_ctx set); @m initialised. */
int session_open_ctx(uint64_t *seq, struct wire_msg *m);
void assert_alive(int fd, uint64_t seq);
uint32_t call_status(int fd, uint32_t call, uint64_t seq, struct wire_msg *m, uint32_t fake_len,
			    uint16_t *flags);
uint32_t call_u64(int fd, uint32_t call, uint64_t seq, struct wire_msg *m, uint64_t *out);
void put_bytes(struct wire_msg *m, const void *p, uint32_t n);
uint32_t call_reply(int fd, uint32_t call, uint64_t seq, struct wire_msg *m, struct reply *r);
uint32_t graph_node_add(int fd, uint64_t *seq, uint32_t call, struct wire_msg *m);
void put_cond_node(struct wire_msg *m, uint64_t graph, const uint32_t *dep, uint64_t value, uint32_t type,
			  uint32_t size, uint64_t ctx);
void test_conditional_hostile(void **state);
void test_graph_nodes_hostile(void **state);
void test_device_query_hostile(void **state);
void test_tensor_map_hostile(void **state);

#endif
