/* Little-endian fields of the wire, the journal and the snapshot format:
 * the one place that reads and writes them (STYLE.md rule 2). Byte by byte,
 * so any alignment is fine; compilers make each a single load or store. */
#ifndef TERN_LE_H
#define TERN_LE_H

#include <stdint.h>

/* Single bytes too, so that generated code treats every width alike. */
static inline void le8_put(uint8_t *p, uint8_t v)
{
	p[0] = v;
}

static inline uint8_t le8_get(const uint8_t *p)
{
	return p[0];
}

static inline void le16_put(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void le32_put(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void le64_put(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t le16_get(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t le32_get(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t le64_get(const uint8_t *p)
{
	return (uint64_t)le32_get(p) | (uint64_t)le32_get(p + 4) << 32;
}

#endif
