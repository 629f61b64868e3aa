#include "progress.h"

#include <math.h>
#include <string.h>

#include "ckpt.h"

#define BAR_WIDTH 30

void progress_init(struct progress *p, FILE *f, bool enabled, const char *label)
{
	memset(p, 0, sizeof(*p));
	p->f = f;
	p->enabled = enabled;
	p->label = label;
}

void progress_draw(struct progress *p, double fraction, const char *stage,
		   uint64_t bytes, uint64_t total)
{
	char bar[BAR_WIDTH + 1], done[32], all[32], st[24];
	int fill;

	if (!p->enabled)
		return;
	if (!isfinite(fraction) || fraction < 0)
		fraction = 0;
	if (fraction > 1)
		fraction = 1;
	fill = (int)(fraction * BAR_WIDTH);
	memset(bar, '#', (size_t)fill);
	memset(bar + fill, '.', (size_t)(BAR_WIDTH - fill));
	bar[BAR_WIDTH] = 0;
	/* The stage comes from ternd: keep it short and printable. */
	snprintf(st, sizeof(st), "%s", stage ? stage : "");
	for (char *s = st; *s; s++)
		if (*s < 0x20 || *s == 0x7f)
			*s = '?';
	/* \r + erase-line: redraw in place whatever the previous width was. */
	fprintf(p->f, "\r\033[K%s [%s] %3d%%", p->label ? p->label : "", bar, (int)(fraction * 100));
	if (st[0])
		fprintf(p->f, "  %s", st);
	if (total) {
		ckpt_size_format(bytes, done, sizeof(done));
		ckpt_size_format(total, all, sizeof(all));
		fprintf(p->f, "  %s / %s", done, all);
	}
	fflush(p->f);
	p->drawn = true;
}

void progress_line_draw(struct progress *p, const struct control_progress *line)
{
	bool sizes = line->bytes && line->total;

	progress_draw(p, line->progress, line->stage, sizes ? line->bytes : 0, sizes ? line->total : 0);
}

void progress_clear(struct progress *p)
{
	if (!p->drawn)
		return;
	fputs("\r\033[K", p->f);
	fflush(p->f);
	p->drawn = false;
}
