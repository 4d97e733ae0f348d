/* tool.c: the shared main() scaffolding of mt-* tools (see tool.h). */
#include "tool.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/atomic.h"
#include "base/knobs.h"
#include "base/log.h"
#include "base/version.h"

static const struct mt_tool_info *tool;

static void on_fatal_signal(int sig)
{
	/* leave no temporary output behind, then die of the same signal */
	mt_atomic_unlink_all();
	signal(sig, SIG_DFL);
	raise(sig);
}

void mt_tool_start(const struct mt_tool_info *t)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
	struct sigaction sa;

	tool = t;
	mt_log_init(t->name, MT_LOG_INFO);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_fatal_signal;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaction(sigs[i], &sa, NULL);
	/* a closed pipe downstream is a normal way for a pipeline to end */
	signal(SIGPIPE, SIG_DFL);
}

void mt_die(int code, const char *fmt, ...)
{
	char msg[4096];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fflush(stdout);
	fprintf(stderr, "%s: error: %s\n", tool ? tool->name : "mt", msg);
	mt_atomic_unlink_all();
	exit(code);
}

void mt_die_err(const struct mt_err *e)
{
	if (e->code == MT_EXIT_USAGE && tool) {
		fflush(stdout);
		fprintf(stderr, "%s: error: %s\ntry '%s --help' for more information\n", tool->name, e->msg,
			tool->name);
		mt_atomic_unlink_all();
		exit(MT_EXIT_USAGE);
	}
	mt_die(e->code ? e->code : MT_EXIT_IO, "%s", e->msg[0] ? e->msg : "unknown error");
}

long long mt_tool_num(struct mt_opt *o, long long min, long long max)
{
	long long v;

	if (mt_opt_long(o, min, max, &v))
		mt_die_usage(o, "%s", o->err.msg);
	return v;
}

double mt_tool_real(struct mt_opt *o)
{
	double v;

	if (mt_opt_double(o, &v))
		mt_die_usage(o, "%s", o->err.msg);
	return v;
}

void mt_die_usage(const struct mt_opt *o, const char *fmt, ...)
{
	char msg[4096];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s: error: %s\n", o->tool->name, msg);
	mt_opt_print_usage(o, stderr);
	fprintf(stderr, "try '%s --help' for more information\n", o->tool->name);
	exit(MT_EXIT_USAGE);
}

static void print_version(const struct mt_tool_info *t, int verbose)
{
	char features[512];

	mt_version_features(features, sizeof(features));
	printf("%s (mt) %s\n%s", t->name, mt_version(), features);
	if (verbose)
		mt_knobs_print(stdout);
}

/* -v, -qv or --verbose anywhere before "--": getopt returns --version before it has
 * seen a -v that follows it */
static int asks_verbose(const struct mt_opt *o)
{
	if (o->verbose)
		return 1;
	for (int i = 1; i < o->argc && strcmp(o->argv[i], "--"); i++) {
		const char *a = o->argv[i];
		if (!strcmp(a, "--verbose"))
			return 1;
		if (a[0] == '-' && a[1] && a[1] != '-' && strspn(a + 1, "qv") == strlen(a + 1) && strchr(a + 1, 'v'))
			return 1;
	}
	return 0;
}

void mt_tool_common(struct mt_opt *o, int id)
{
	switch (id) {
	case MT_OPT_HELP:
		mt_opt_print_help(o, stdout);
		exit(fflush(stdout) == 0 ? MT_EXIT_OK : MT_EXIT_IO);
	case MT_OPT_VERSION:
		print_version(o->tool, asks_verbose(o));
		exit(fflush(stdout) == 0 ? MT_EXIT_OK : MT_EXIT_IO);
	case MT_OPT_ERROR:
		mt_die_usage(o, "%s", o->err.msg);
	default:
		break;
	}
}

static int common_flag(const char *a)
{
	if (!strcmp(a, "--quiet") || !strcmp(a, "--verbose"))
		return 1;
	if (a[0] != '-' || !a[1])
		return 0;
	for (const char *c = a + 1; *c; c++)
		if (*c != 'q' && *c != 'v')
			return 0;
	return 1;
}

void mt_tool_command_first(int argc, char **argv, const char *const *words)
{
	int i = 1, known = 0;
	char *word;

	while (i < argc && common_flag(argv[i]))
		i++;
	if (i == 1 || i >= argc)
		return;
	for (const char *const *w = words; *w; w++)
		known |= !strcmp(argv[i], *w);
	if (!known)
		return;
	word = argv[i];
	memmove(&argv[2], &argv[1], (size_t)(i - 1) * sizeof(*argv));
	argv[1] = word;
}

void mt_tool_unavailable(const struct mt_tool_info *t, int argc, char **argv)
{
	struct mt_opt o;
	int id;

	mt_tool_start(t);
	if (mt_opt_init(&o, t, NULL, argc, argv))
		mt_die_err(&o.err);
	while ((id = mt_opt_next(&o)) != MT_OPT_END)
		mt_tool_common(&o, id); /* help, version and bad options exit here */
	mt_die(MT_EXIT_USAGE, "not available yet: this version of mt does not implement %s; "
	       "see %s for what is planned", t->name, t->doc);
}
