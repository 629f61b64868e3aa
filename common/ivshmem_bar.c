#define LOG_PREFIX "ivshmem: "
#include "ivshmem_bar.h"
#include "le.h"
#include "log.h"
#include "shm_chan.h"
#include "vm_id.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PAGE 4096u

/* shm_chan's header page before its two rings. */
#define RING_HEADER_BYTES 4096u

int ivshmem_layout_plan(uint64_t bar_bytes, uint64_t slot_bytes, struct ivshmem_layout *out)
{
	uint64_t n;

	memset(out, 0, sizeof(*out));
	if (slot_bytes < IVSHMEM_SLOT_BYTES_MIN || slot_bytes % PAGE || bar_bytes > IVSHMEM_BAR_BYTES_MAX ||
	    bar_bytes < IVSHMEM_HEADER_BYTES + slot_bytes)
		return -EINVAL;
	n = (bar_bytes - IVSHMEM_HEADER_BYTES) / slot_bytes;
	out->bar_bytes = bar_bytes;
	out->slot_bytes = slot_bytes;
	out->slot_count = n > IVSHMEM_SLOTS_MAX ? IVSHMEM_SLOTS_MAX : (uint32_t)n;
	return 0;
}

uint64_t ivshmem_slot_offset(const struct ivshmem_layout *l, uint32_t index)
{
	return IVSHMEM_HEADER_BYTES + (uint64_t)index * l->slot_bytes;
}

bool ivshmem_range_in_slot(const struct ivshmem_layout *l, uint64_t offset, uint64_t bytes, uint32_t *index)
{
	uint64_t i, in;

	if (offset < IVSHMEM_HEADER_BYTES || !l->slot_bytes)
		return false;
	i = (offset - IVSHMEM_HEADER_BYTES) / l->slot_bytes;
	in = (offset - IVSHMEM_HEADER_BYTES) % l->slot_bytes;
	if (i >= l->slot_count || bytes > l->slot_bytes - in)
		return false;
	if (index)
		*index = (uint32_t)i;
	return true;
}

bool ivshmem_ring_bytes_fit(const struct ivshmem_layout *l, uint64_t ring_bytes)
{
	return ring_bytes >= SHM_RING_MIN && ring_bytes <= SHM_RING_MAX && !(ring_bytes & (ring_bytes - 1)) &&
	       RING_HEADER_BYTES + 2 * ring_bytes <= l->slot_bytes;
}

uint64_t ivshmem_ring_bytes_pick(const struct ivshmem_layout *l)
{
	uint64_t r = SHM_RING_DEFAULT;

	/* Half the slot stays free: room for pinned buffers carved from it. */
	while (r > SHM_RING_MIN && RING_HEADER_BYTES + 2 * r > l->slot_bytes / 2)
		r >>= 1;
	return ivshmem_ring_bytes_fit(l, r) ? r : 0;
}

void ivshmem_header_encode(const struct ivshmem_layout *l, uint8_t *buf)
{
	memset(buf, 0, IVSHMEM_HEADER_BYTES);
	le64_put(buf, IVSHMEM_BAR_MAGIC);
	le32_put(buf + 8, IVSHMEM_BAR_VERSION);
	le32_put(buf + 12, IVSHMEM_HEADER_BYTES);
	le64_put(buf + 16, l->bar_bytes);
	le64_put(buf + 24, l->slot_bytes);
	le32_put(buf + 32, l->slot_count);
	for (uint32_t i = 0; i < l->slot_count; i++)
		ivshmem_slot_entry_encode(l, i, IVSHMEM_SLOT_FREE, 0,
					  buf + IVSHMEM_HEADER_FIXED + (size_t)i * IVSHMEM_SLOT_ENTRY);
}

uint64_t ivshmem_slot_entry_encode(const struct ivshmem_layout *l, uint32_t index, uint32_t state,
				   uint64_t ring_bytes, uint8_t *buf)
{
	memset(buf, 0, IVSHMEM_SLOT_ENTRY);
	le64_put(buf, ivshmem_slot_offset(l, index));
	le64_put(buf + 8, l->slot_bytes);
	le32_put(buf + 16, state);
	le64_put(buf + 24, ring_bytes);
	return IVSHMEM_HEADER_FIXED + (uint64_t)index * IVSHMEM_SLOT_ENTRY;
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

int ivshmem_header_parse(const uint8_t *buf, size_t len, uint64_t bar_bytes, struct ivshmem_layout *out,
			 struct ivshmem_slot *slots)
{
	struct ivshmem_layout l, planned;
	uint32_t count;

	memset(out, 0, sizeof(*out));
	if (len < IVSHMEM_HEADER_FIXED || le64_get(buf) != IVSHMEM_BAR_MAGIC ||
	    le32_get(buf + 8) != IVSHMEM_BAR_VERSION || le32_get(buf + 12) != IVSHMEM_HEADER_BYTES ||
	    le32_get(buf + 36) || !all_zero(buf + 40, IVSHMEM_HEADER_FIXED - 40))
		return -EINVAL;
	l.bar_bytes = le64_get(buf + 16);
	l.slot_bytes = le64_get(buf + 24);
	count = le32_get(buf + 32);
	/* The count may be any that fits, not only the most that would: a
	 * host with fewer slots configured writes fewer. */
	if (l.bar_bytes != bar_bytes || ivshmem_layout_plan(bar_bytes, l.slot_bytes, &planned) ||
	    !count || count > planned.slot_count)
		return -EINVAL;
	l.slot_count = count;
	if (len < IVSHMEM_HEADER_FIXED + (size_t)count * IVSHMEM_SLOT_ENTRY)
		return -EINVAL;
	for (uint32_t i = 0; i < count; i++) {
		const uint8_t *e = buf + IVSHMEM_HEADER_FIXED + (size_t)i * IVSHMEM_SLOT_ENTRY;
		struct ivshmem_slot s = {
			.offset = le64_get(e), .bytes = le64_get(e + 8), .state = le32_get(e + 16),
			.ring_bytes = le64_get(e + 24),
		};

		/* Each slot where the layout puts it: then none overlaps another
		 * or the header, and none reaches past the BAR. */
		if (s.offset != ivshmem_slot_offset(&l, i) || s.bytes != l.slot_bytes || le32_get(e + 20))
			return -EINVAL;
		if (s.state == IVSHMEM_SLOT_FREE ? s.ring_bytes != 0
		    : s.state != IVSHMEM_SLOT_CLAIMED || !ivshmem_ring_bytes_fit(&l, s.ring_bytes))
			return -EINVAL;
		if (slots)
			slots[i] = s;
	}
	*out = l;
	return 0;
}

/* ---- host side ---- */

int ivshmem_host_path(const char *dir, const char *uuid, char *buf, size_t cap)
{
	int n;

	if (!vm_uuid_valid(uuid))
		return -EINVAL;
	n = snprintf(buf, cap, "%s/tern-%s", dir, uuid);
	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

static int range_lock(int fd, short type, uint64_t start, uint64_t len, bool wait)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = (off_t)start, .l_len = (off_t)len };

	return fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl) ? -errno : 0;
}

static int pwrite_all(int fd, const uint8_t *p, size_t n, uint64_t at)
{
	while (n) {
		ssize_t w = pwrite(fd, p, n, (off_t)at);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		p += w;
		n -= (size_t)w;
		at += (uint64_t)w;
	}
	return 0;
}

/* Under the header's lock: the header made this layout's, then slot
 * @index's entry written. Other hosts' entries are kept when the header was
 * already right. */
static int header_update(struct ivshmem_host *h, uint32_t state, uint64_t ring_bytes)
{
	uint8_t buf[IVSHMEM_HEADER_BYTES], entry[IVSHMEM_SLOT_ENTRY];
	struct ivshmem_layout seen;
	uint64_t at;
	ssize_t n;
	int ret = range_lock(h->fd, F_WRLCK, 0, IVSHMEM_HEADER_BYTES, true);

	if (ret)
		return ret;
	n = pread(h->fd, buf, sizeof(buf), 0);
	if (n < 0) {
		ret = -errno;
		goto out_unlock;
	}
	if (ivshmem_header_parse(buf, (size_t)n, h->layout.bar_bytes, &seen, NULL) ||
	    seen.slot_bytes != h->layout.slot_bytes || seen.slot_count != h->layout.slot_count) {
		ivshmem_header_encode(&h->layout, buf);
		ret = pwrite_all(h->fd, buf, sizeof(buf), 0);
		if (ret)
			goto out_unlock;
	}
	at = ivshmem_slot_entry_encode(&h->layout, h->slot, state, ring_bytes, entry);
	ret = pwrite_all(h->fd, entry, sizeof(entry), at);
out_unlock:
	range_lock(h->fd, F_UNLCK, 0, IVSHMEM_HEADER_BYTES, false);
	return ret;
}

static int slot_lock(struct ivshmem_host *h, uint32_t i)
{
	int r = range_lock(h->fd, F_WRLCK, ivshmem_slot_offset(&h->layout, i), h->layout.slot_bytes, false);

	if (!r) {
		h->slot = i;
		h->offset = ivshmem_slot_offset(&h->layout, i);
	}
	return r == -EAGAIN || r == -EACCES ? -EBUSY : r;
}

int ivshmem_host_claim(struct ivshmem_host *h, const char *path, uint64_t slot_bytes, uint64_t ring_bytes,
		       uint32_t want)
{
	struct stat st;
	int ret;

	memset(h, 0, sizeof(*h));
	h->fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (h->fd < 0)
		return -errno;
	if (fstat(h->fd, &st) || !S_ISREG(st.st_mode)) {
		ret = -EINVAL;
		goto out_close;
	}
	ret = ivshmem_layout_plan((uint64_t)st.st_size, slot_bytes, &h->layout);
	if (ret)
		goto out_close;
	if (!ivshmem_ring_bytes_fit(&h->layout, ring_bytes)) {
		ret = -EINVAL;
		goto out_close;
	}
	ret = want < h->layout.slot_count ? slot_lock(h, want) : -EBUSY;
	for (uint32_t i = 0; i < h->layout.slot_count && ret == -EBUSY; i++)
		ret = slot_lock(h, i);
	if (!ret)
		ret = header_update(h, IVSHMEM_SLOT_CLAIMED, ring_bytes);
	if (!ret)
		return 0;
out_close:
	close(h->fd);
	h->fd = -1;
	return ret;
}

void ivshmem_host_release(struct ivshmem_host *h)
{
	if (!h || h->fd < 0)
		return;
	if (header_update(h, IVSHMEM_SLOT_FREE, 0))
		pr_debug("slot %u: header not updated", h->slot);
	close(h->fd);           /* the slot's lock goes with it */
	h->fd = -1;
}

/* ---- guest side ---- */

static bool sysfs_hex_is(const char *dir, const char *name, unsigned want)
{
	char path[512], text[32];
	FILE *f;
	unsigned v;
	bool ok;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "re");
	if (!f)
		return false;
	ok = fgets(text, sizeof(text), f) && sscanf(text, "%x", &v) == 1 && v == want;
	fclose(f);
	return ok;
}

static int bar_find(char *out, size_t cap)
{
	const char *root = "/sys/bus/pci/devices";
	DIR *d = opendir(root);
	struct dirent *e;
	int ret = -ENOENT;

	if (!d)
		return -ENOENT;
	while (ret && (e = readdir(d))) {
		char dir[300];

		if (e->d_name[0] == '.')
			continue;
		snprintf(dir, sizeof(dir), "%s/%s", root, e->d_name);
		if (sysfs_hex_is(dir, "vendor", IVSHMEM_PCI_VENDOR) && sysfs_hex_is(dir, "device", IVSHMEM_PCI_DEVICE))
			ret = snprintf(out, cap, "%s/resource2", dir) < (int)cap ? 0 : -ENAMETOOLONG;
	}
	closedir(d);
	return ret;
}

int ivshmem_guest_open(struct ivshmem_guest *g, const char *path)
{
	struct stat st;
	void *p;
	int fd, ret;

	memset(g, 0, sizeof(*g));
	if (path) {
		if (snprintf(g->path, sizeof(g->path), "%s", path) >= (int)sizeof(g->path))
			return -ENAMETOOLONG;
	} else {
		ret = bar_find(g->path, sizeof(g->path));
		if (ret)
			return ret;
	}
	/* O_SYNC: a PCI resource file maps uncached-minus without it
	 * (measured in VM.md with it). */
	fd = open(g->path, O_RDWR | O_CLOEXEC | O_SYNC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) || st.st_size < (off_t)IVSHMEM_HEADER_BYTES ||
	    (uint64_t)st.st_size > IVSHMEM_BAR_BYTES_MAX) {
		close(fd);
		return -EINVAL;
	}
	p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ret = p == MAP_FAILED ? -errno : 0;
	close(fd);
	if (ret)
		return ret;
	g->base = p;
	g->bytes = (uint64_t)st.st_size;
	return 0;
}

void ivshmem_guest_close(struct ivshmem_guest *g)
{
	if (g && g->base)
		munmap(g->base, g->bytes);
	if (g)
		memset(g, 0, sizeof(*g));
}

void *ivshmem_guest_slot(struct ivshmem_guest *g, uint32_t index, uint64_t offset, uint64_t bytes,
			 uint64_t ring_bytes)
{
	uint8_t copy[IVSHMEM_HEADER_BYTES];
	struct ivshmem_slot slots[IVSHMEM_SLOTS_MAX];
	struct ivshmem_layout l;

	if (!g->base)
		return NULL;
	memcpy(copy, g->base, sizeof(copy));
	if (ivshmem_header_parse(copy, sizeof(copy), g->bytes, &l, slots) || index >= l.slot_count ||
	    slots[index].offset != offset || slots[index].bytes != bytes ||
	    slots[index].state != IVSHMEM_SLOT_CLAIMED || slots[index].ring_bytes != ring_bytes)
		return NULL;
	return g->base + offset;
}
