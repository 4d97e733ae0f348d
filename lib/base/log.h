/* log.h: leveled messages on stderr, prefixed with the tool's name.
 *
 * Every line reads "mt-<tool>: <level>: <text>" (info lines carry no level word),
 * so messages from a pipeline of tools can be told apart. The level is set once
 * by the tool from -q / -v; the library logs warnings and progress notes but
 * never decides to stop (that is the caller's job, see err.h). */
#ifndef MT_LOG_H
#define MT_LOG_H

enum mt_log_level {
	MT_LOG_ERROR = 0,
	MT_LOG_WARN = 1,
	MT_LOG_INFO = 2,
	MT_LOG_DEBUG = 3,
};

void mt_log_init(const char *prog, enum mt_log_level level);
void mt_log_set_level(enum mt_log_level level);
enum mt_log_level mt_log_get_level(void);
const char *mt_log_prog(void);
void mt_log(enum mt_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define mt_error(...) mt_log(MT_LOG_ERROR, __VA_ARGS__)
#define mt_warn(...) mt_log(MT_LOG_WARN, __VA_ARGS__)
#define mt_info(...) mt_log(MT_LOG_INFO, __VA_ARGS__)
#define mt_debug(...) mt_log(MT_LOG_DEBUG, __VA_ARGS__)

#endif
