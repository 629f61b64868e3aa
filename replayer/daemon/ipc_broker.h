/* The supervisor's side of IPC between sessions (the protocol, the guest's
 * handle and the worker's side: exec/ipc_channel.h): the table of exported
 * memory and events, served to each worker over its channel.
 */
#ifndef TERN_IPC_BROKER_H
#define TERN_IPC_BROKER_H

#include "ipc_channel.h"

/* Supervisor side. Not thread-safe: the supervisor's loop owns it. */
struct ipc_broker;
int ipc_broker_create(struct ipc_broker **out);
void ipc_broker_destroy(struct ipc_broker *b);
/* Serve one request from @chan, the channel of the worker in slot @owner.
 * Returns -errno when the channel is closed or broken (the caller closes it). */
int ipc_broker_serve(struct ipc_broker *b, int chan, unsigned owner);
/* The worker in slot @owner ended: its exports go. */
void ipc_broker_drop_owner(struct ipc_broker *b, unsigned owner);

#endif
