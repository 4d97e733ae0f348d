/* genserver.c: the HTTP side of the generation server (genserver.h) on libmicrohttpd.
 * Requests are parsed and answered by genapi.c; here are only routes, body limits,
 * status codes and the daemon's defences (polling mode, timeouts, connection limit). */
#include "infer/genserver.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>

#include "infer/genapi.h"
#include "infer/openai.h"
#include "base/array.h"
#include "base/log.h"

struct mt_genserver {
	struct MHD_Daemon *d;
	struct mt_gen *g;
	struct mt_genserver_opts o;
	struct mt_openai oa;
	pthread_mutex_t lock;
	unsigned max_conns;
};

/* Descriptors kept for everything that is not a connection: the listening socket, the
 * pool's epoll and signalling descriptors, the model's files, logs. */
#define FD_RESERVE 64

/* Raise the soft limit on open files to the hard one and return how many connections
 * fit under it (want, or fewer). */
static unsigned fit_connections(unsigned want)
{
	struct rlimit rl;
	rlim_t room;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return want;
	if (rl.rlim_cur != rl.rlim_max) {
		struct rlimit up = { rl.rlim_max, rl.rlim_max };
		if (setrlimit(RLIMIT_NOFILE, &up) == 0)
			rl.rlim_cur = rl.rlim_max;
	}
	if (rl.rlim_cur == RLIM_INFINITY)
		return want;
	room = rl.rlim_cur > 2 * FD_RESERVE ? rl.rlim_cur - FD_RESERVE : rl.rlim_cur / 2;
	return room < (rlim_t)want ? (unsigned)room : want;
}

/* what one connection has sent so far */
struct upload {
	char *buf;
	size_t len, cap;
	int too_big;
	int openai;      /* an openai.c route: its answers, errors too, are in OpenAI's shape */
};

static enum MHD_Result reply(struct MHD_Connection *c, unsigned int status, const char *json, int allow_put)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(json), (void *)json, MHD_RESPMEM_MUST_COPY);
	enum MHD_Result ret;

	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, "Content-Type", "application/json");
	if (allow_put)
		MHD_add_response_header(r, "Allow", "PUT");
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result reply_error(struct MHD_Connection *c, unsigned int status, const char *msg, int allow_put)
{
	json_t *j = json_pack("{s:s}", "error", msg);
	char *s = json_dumps(j, JSON_COMPACT);
	enum MHD_Result ret = reply(c, status, s ? s : "{\"error\":\"out of memory\"}", allow_put);

	free(s);
	json_decref(j);
	return ret;
}

static enum MHD_Result reply_openai_error(struct MHD_Connection *c, unsigned int status, const char *msg)
{
	char *s = mt_openai_error((int)status, msg, NULL, NULL);
	enum MHD_Result ret = reply(c, status, s ? s : "{\"error\":{\"message\":\"out of memory\"}}", 0);

	free(s);
	return ret;
}

/* an openai.c route, its whole body in */
static enum MHD_Result serve_openai(struct mt_genserver *s, struct MHD_Connection *c, const char *url,
				    const char *method, const struct upload *u)
{
	char *resp = NULL;
	int status;
	enum MHD_Result ret;
	struct timespec t0, t1;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	pthread_mutex_lock(&s->lock);
	status = mt_openai_handle(&s->oa, method, url, u->buf ? u->buf : "", u->len, &resp);
	pthread_mutex_unlock(&s->lock);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	mt_info("%.8s %.80s %d, %zu bytes in, %zu out, %.3f s", method, url, status, u->len, resp ? strlen(resp) : 0,
		(double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
	if (!resp)
		return reply_openai_error(c, 500, "out of memory");
	ret = reply(c, (unsigned int)status, resp, 0);
	free(resp);
	return ret;
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
	struct upload *u = *con_cls;

	if (u) {
		free(u->buf);
		free(u);
		*con_cls = NULL;
	}
}

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
	if (key && !strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH))
		++*(int *)cls;
	return MHD_YES;
}

/* libmicrohttpd refuses a Content-Length that is not a number itself, but takes the first
 * of several: a request that says its length twice is ambiguous, so it is a 400 here. */
static int content_lengths(struct MHD_Connection *c)
{
	int n = 0;

	MHD_get_connection_values(c, MHD_HEADER_KIND, count_header, &n);
	return n;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
			      const char *version, const char *data, size_t *data_size, void **con_cls)
{
	struct mt_genserver *s = cls;
	struct upload *u = *con_cls;
	char msg[128];

	if (!u) { /* first call: headers only */
		const char *cl;
		int oa = mt_openai_owns(url);
		if (!oa && strcmp(url, "/api") != 0) {
			snprintf(msg, sizeof(msg), "no such path: %.60s (PUT /api, or OpenAI's /v1/)", url);
			return reply_error(c, MHD_HTTP_NOT_FOUND, msg, 0);
		}
		if (!oa && strcmp(method, "PUT") != 0) {
			snprintf(msg, sizeof(msg), "method %.20s not allowed on /api: use PUT", method);
			return reply_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, msg, 1);
		}
		if (content_lengths(c) > 1)
			return reply_error(c, MHD_HTTP_BAD_REQUEST, "more than one Content-Length header", 0);
		cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
		if (cl && strtoull(cl, NULL, 10) > s->o.max_body) {
			snprintf(msg, sizeof(msg), "the body is larger than the limit of %zu bytes", s->o.max_body);
			return oa ? reply_openai_error(c, 413, msg) : reply_error(c, 413 /* content too large */, msg, 0);
		}
		if (!(u = calloc(1, sizeof(*u))))
			return MHD_NO;
		u->openai = oa;
		*con_cls = u;
		return MHD_YES;
	}
	if (*data_size) { /* a piece of the body */
		if (!u->too_big && u->len + *data_size > s->o.max_body)
			u->too_big = 1;
		if (!u->too_big) {
			if (mt_array_grow(&u->buf, &u->cap, u->len + *data_size, 1, 4096))
				return MHD_NO;
			memcpy(u->buf + u->len, data, *data_size);
			u->len += *data_size;
		}
		*data_size = 0;
		return MHD_YES;
	}
	/* the whole body is in */
	if (u->too_big) {
		snprintf(msg, sizeof(msg), "the body is larger than the limit of %zu bytes", s->o.max_body);
		return u->openai ? reply_openai_error(c, 413, msg) : reply_error(c, 413 /* content too large */, msg, 0);
	}
	if (u->openai)
		return serve_openai(s, c, url, method, u);
	{
		char *resp = NULL;
		int status;
		enum MHD_Result ret;
		struct timespec t0, t1;

		clock_gettime(CLOCK_MONOTONIC, &t0);
		pthread_mutex_lock(&s->lock);
		status = mt_genapi_handle(s->g, u->buf ? u->buf : "", u->len, s->o.seed, &resp);
		pthread_mutex_unlock(&s->lock);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		mt_info("PUT /api %d, %zu bytes in, %zu out, %.3f s", status, u->len, resp ? strlen(resp) : 0,
			(double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
		ret = reply(c, (unsigned int)status, resp, 0);
		free(resp);
		return ret;
	}
}

int mt_genserver_start(struct mt_genserver **out, struct mt_gen *g, const struct mt_genserver_opts *o,
		       struct mt_err *err)
{
	struct mt_genserver *s = calloc(1, sizeof(*s));
	struct sockaddr_storage ss;
	const char *host = o->host ? o->host : "127.0.0.1";
	/* epoll on Linux (poll elsewhere), from a pool of threads */
	unsigned int flags = MHD_USE_AUTO_INTERNAL_THREAD;
	unsigned timeout = o->timeout_s ? o->timeout_s : MT_GENSERVER_TIMEOUT;
	unsigned want = o->max_conns ? o->max_conns : MT_GENSERVER_MAX_CONNS;

	*out = NULL;
	if (!s)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	memset(&ss, 0, sizeof(ss));
	if (inet_pton(AF_INET, host, &((struct sockaddr_in *)&ss)->sin_addr) == 1) {
		((struct sockaddr_in *)&ss)->sin_family = AF_INET;
		((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)o->port);
	} else if (inet_pton(AF_INET6, host, &((struct sockaddr_in6 *)&ss)->sin6_addr) == 1) {
		((struct sockaddr_in6 *)&ss)->sin6_family = AF_INET6;
		((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)o->port);
		flags |= MHD_USE_IPv6;
	} else {
		free(s);
		return mt_err_set(err, MT_EXIT_USAGE, "--host '%s' is not a numeric IPv4 or IPv6 address", host);
	}
	s->g = g;
	s->o = *o;
	mt_openai_init(&s->oa, g, o->model, o->seed);
	s->max_conns = fit_connections(want);
	if (s->max_conns < want)
		mt_warn("the server takes %u connections at most, not %u: the open-file limit is %u (ulimit -n)",
			s->max_conns, want, s->max_conns + FD_RESERVE);
	if (s->max_conns < MT_GENSERVER_THREADS) {
		free(s);
		return mt_err_set(err, MT_EXIT_IO, "the open-file limit leaves no room for connections (ulimit -n)");
	}
	pthread_mutex_init(&s->lock, NULL);
	s->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, handle, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
				MHD_OPTION_NOTIFY_COMPLETED, completed, NULL,
				MHD_OPTION_CONNECTION_TIMEOUT, timeout,
				MHD_OPTION_CONNECTION_LIMIT, s->max_conns,
				MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)MT_GENSERVER_THREADS,
				MHD_OPTION_END);
	if (!s->d) {
		pthread_mutex_destroy(&s->lock);
		free(s);
		return mt_err_set(err, MT_EXIT_IO, "cannot listen on %s port %d (in use, or not allowed?)", host, o->port);
	}
	{
		const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_FLAGS);
		mt_info("connections: %u open at most, closed after %u s of silence; %u threads polling with %s",
			s->max_conns, timeout, MT_GENSERVER_THREADS,
			di && (di->flags & MHD_USE_EPOLL) ? "epoll" : di && (di->flags & MHD_USE_POLL) ? "poll" : "select");
	}
	*out = s;
	return 0;
}

unsigned mt_genserver_max_conns(const struct mt_genserver *s)
{
	return s->max_conns;
}

void mt_genserver_stop(struct mt_genserver *s)
{
	if (!s)
		return;
	MHD_stop_daemon(s->d);
	pthread_mutex_destroy(&s->lock);
	free(s);
}
