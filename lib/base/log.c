/* log.c: leveled logging to stderr (see log.h). One fprintf per line so lines
 * from several threads do not interleave mid-line. */
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>

static const char *log_prog = "mt";
static enum mt_log_level log_level = MT_LOG_INFO;

void mt_log_init(const char *prog, enum mt_log_level level)
{
	if (prog)
		log_prog = prog;
	log_level = level;
}

void mt_log_set_level(enum mt_log_level level) { log_level = level; }
enum mt_log_level mt_log_get_level(void) { return log_level; }
const char *mt_log_prog(void) { return log_prog; }

void mt_log(enum mt_log_level level, const char *fmt, ...)
{
	static const char *const word[] = { "error: ", "warning: ", "", "debug: " };
	char line[4096];
	va_list ap;

	if (level > log_level)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s: %s%s\n", log_prog, word[level], line);
}
