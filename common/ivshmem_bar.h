/* The ivshmem BAR: one file of shared memory between a libvirt domain and
 * ternd (an ivshmem-plain device's BAR2 in the guest, /dev/shm/tern-UUID on
 * the host; docs/vm-transport.md, "ivshmem"), cut into fixed slots, one per
 * session, each holding that session's shm_chan rings.
 *
 *     [0, 4096)                      header: magic, version, layout, slot table
 *     [4096 + i * slot_bytes, +slot_bytes)   slot i: the rings (shm_chan's
 *                                    header page, then two rings), the rest unused
 *
 * The host owns the layout: it computes it from the file's size and its own
 * slot size (ivshmem_layout_plan), writes the header for the guest to read,
 * and never reads anything back from the BAR but through ivshmem_header_parse
 * on a copy, which checks every field. Which session holds a slot is an
 * open-file-description lock on the slot's bytes of the host's file
 * (ivshmem_host_claim): the guest cannot touch it, and it goes away with the
 * worker however the worker ends. A worker maps only its own slot.
 *
 * Guest processes of one domain share the BAR (it is the guest's memory, one
 * device for the whole VM): a guest process can scribble on another's slot,
 * as root in the guest could on any of its memory. The host side only
 * guarantees that what a slot holds never makes it read or write outside
 * that slot.
 */
#ifndef TERN_IVSHMEM_BAR_H
#define TERN_IVSHMEM_BAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define IVSHMEM_BAR_MAGIC 0x3152414253564954ull         /* "TIVSBAR1" */
#define IVSHMEM_BAR_VERSION 1u
#define IVSHMEM_HEADER_BYTES 4096u
#define IVSHMEM_SLOTS_MAX 64u
/* The host's slot size unless configured (ternd --ivshmem-slot). */
#define IVSHMEM_SLOT_BYTES_DEFAULT (32ull << 20)
/* The smallest slot: the smallest rings fit it. */
#define IVSHMEM_SLOT_BYTES_MIN (256ull << 10)
/* The largest BAR looked at: QEMU's ivshmem takes sizes up to this. */
#define IVSHMEM_BAR_BYTES_MAX (1ull << 40)

/* ivshmem-plain's PCI ids: the guest finds its BAR by them. */
#define IVSHMEM_PCI_VENDOR 0x1af4
#define IVSHMEM_PCI_DEVICE 0x1110

/* Slot states in the header's table: informational for the guest; the
 * host's claim is its lock, never this field. */
enum ivshmem_slot_state {
	IVSHMEM_SLOT_FREE = 0,
	IVSHMEM_SLOT_CLAIMED = 1,
};

/* The header, little-endian, in the BAR's first page:
 *   0 magic u64, 8 version u32, 12 header_bytes u32, 16 bar_bytes u64,
 *   24 slot_bytes u64, 32 slot_count u32, 36 reserved u32 (0),
 *   40 reserved (0) up to 64, then slot_count entries of 32 bytes:
 *   0 offset u64, 8 bytes u64, 16 state u32, 20 reserved u32 (0), 24 ring_bytes u64 */
#define IVSHMEM_HEADER_FIXED 64u
#define IVSHMEM_SLOT_ENTRY 32u
_Static_assert(IVSHMEM_HEADER_FIXED + IVSHMEM_SLOTS_MAX * IVSHMEM_SLOT_ENTRY <= IVSHMEM_HEADER_BYTES,
	       "the slot table overflows the header page");

/* A layout: the host's own (trusted), or one parsed and checked. */
struct ivshmem_layout {
	uint64_t bar_bytes;
	uint64_t slot_bytes;
	uint32_t slot_count;
};

/* One slot table entry as parsed. */
struct ivshmem_slot {
	uint64_t offset, bytes;
	uint32_t state;
	uint64_t ring_bytes;            /* 0 when free */
};

/* The host's layout for a BAR of @bar_bytes and slots of @slot_bytes (a
 * multiple of 4096, at least IVSHMEM_SLOT_BYTES_MIN): as many slots as fit,
 * at most IVSHMEM_SLOTS_MAX. 0, or -EINVAL when not one slot fits. */
int ivshmem_layout_plan(uint64_t bar_bytes, uint64_t slot_bytes, struct ivshmem_layout *out);
/* Slot @index's offset in the BAR (@index < slot_count). */
uint64_t ivshmem_slot_offset(const struct ivshmem_layout *l, uint32_t index);
/* Whether [@offset, @offset + @bytes) lies in one slot of @l, not crossing
 * its end (overflow-safe); the slot's index into *@index when not NULL. */
bool ivshmem_range_in_slot(const struct ivshmem_layout *l, uint64_t offset, uint64_t bytes, uint32_t *index);
/* The ring size the host picks when the guest leaves it to it: the largest
 * power of two up to SHM_RING_DEFAULT whose rings take at most half the slot. */
uint64_t ivshmem_ring_bytes_pick(const struct ivshmem_layout *l);
/* Whether rings of @ring_bytes (shm_chan's limits) fit one slot. */
bool ivshmem_ring_bytes_fit(const struct ivshmem_layout *l, uint64_t ring_bytes);

/* Encode @l's header, every slot free, into @buf (IVSHMEM_HEADER_BYTES). */
void ivshmem_header_encode(const struct ivshmem_layout *l, uint8_t *buf);
/* Encode slot @index's table entry into @buf (IVSHMEM_SLOT_ENTRY bytes), and
 * where that entry lies in the BAR. */
uint64_t ivshmem_slot_entry_encode(const struct ivshmem_layout *l, uint32_t index, uint32_t state,
				   uint64_t ring_bytes, uint8_t *buf);
/* Check and decode a header copied out of a BAR of @bar_bytes: @len bytes at
 * @buf (a short copy fails). Checked: the magic, version and header size,
 * that bar_bytes is the BAR's, the slot size (a multiple of 4096, at least
 * the minimum), the slot count (1..IVSHMEM_SLOTS_MAX, every slot inside the
 * BAR without overflow), reserved fields 0, and each entry: its offset and
 * size are the layout's own (so no two overlap), its state known, its ring
 * size 0 when free and otherwise rings that fit the slot. 0 or -EINVAL;
 * @slots (IVSHMEM_SLOTS_MAX entries) may be NULL. */
int ivshmem_header_parse(const uint8_t *buf, size_t len, uint64_t bar_bytes, struct ivshmem_layout *out,
			 struct ivshmem_slot *slots);

/* ---- host side ---- */

/* One session's slot of a domain's BAR file. */
struct ivshmem_host {
	int fd;                         /* the BAR file; holds the slot's lock */
	struct ivshmem_layout layout;   /* ours, from the file's size */
	uint32_t slot;
	uint64_t offset;                /* the slot's, in the file */
};

/* Open the BAR file at @path (a regular file, no symbolic link; the host's
 * path, never the guest's choice), plan its layout for @slot_bytes, take
 * slot @want if no other open file description holds it (a write lock on
 * its bytes), else the first one free (@want out of range: any), and record it in the header as claimed with rings of @ring_bytes
 * (the header is rewritten first when it is not this layout's: a fresh BAR,
 * or one the guest scribbled on). 0, or -ENOENT (no such file), -EINVAL (not
 * a regular file, too small), -EBUSY (every slot held), -errno. */
#define IVSHMEM_SLOT_ANY UINT32_MAX
int ivshmem_host_claim(struct ivshmem_host *h, const char *path, uint64_t slot_bytes, uint64_t ring_bytes,
		       uint32_t want);
/* Mark the slot free and drop the claim (closes the file). NULL-safe and
 * idempotent; h->fd is -1 after. */
void ivshmem_host_release(struct ivshmem_host *h);
/* The host's BAR file of domain @uuid in @dir: DIR/tern-UUID, libvirt's
 * /dev/shm/NAME for <shmem name='tern-UUID'>. -ENAMETOOLONG when it does
 * not fit @cap, -EINVAL for an invalid uuid. */
int ivshmem_host_path(const char *dir, const char *uuid, char *buf, size_t cap);

/* ---- guest side ---- */

/* The guest's mapping of the BAR. */
struct ivshmem_guest {
	uint8_t *base;
	uint64_t bytes;
	char path[256];
};

/* Map the BAR: @path, or when NULL the first PCI device 1af4:1110's
 * resource2 under /sys/bus/pci/devices. 0, -ENOENT (none), -errno. */
int ivshmem_guest_open(struct ivshmem_guest *g, const char *path);
void ivshmem_guest_close(struct ivshmem_guest *g);
/* Slot @index as the host assigned it (@offset, @bytes: its attach reply):
 * checked against the header the host wrote (copied first). The slot's
 * first byte, or NULL when the header or the reply do not agree. */
void *ivshmem_guest_slot(struct ivshmem_guest *g, uint32_t index, uint64_t offset, uint64_t bytes,
			 uint64_t ring_bytes);

#endif
