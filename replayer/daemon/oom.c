#define LOG_PREFIX "oom: "
#include "oom.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int oom_score_adj_write(int value)
{
	char text[16];
	int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC), len, ret = 0;

	if (fd < 0)
		ret = -errno;
	len = snprintf(text, sizeof(text), "%d\n", value);
	if (!ret && write(fd, text, (size_t)len) != len)
		ret = -errno;
	if (fd >= 0)
		close(fd);
	return ret;
}

int oom_score_adj_set(int value)
{
	int ret = oom_score_adj_write(value);

	if (ret && value < 0 && !oom_score_adj_write(0))
		pr_warn("cannot set oom_score_adj to %d (%s: no CAP_SYS_RESOURCE?): at 0, the OOM killer "
			"may take this process (pid %d) before others", value, strerror(-ret), getpid());
	else if (ret)
		pr_warn("cannot set oom_score_adj to %d: %s", value, strerror(-ret));
	return ret;
}
