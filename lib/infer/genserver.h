/* genserver.h: Megatron's text generation REST interface over HTTP (libmicrohttpd).
 *
 * Megatron's route: PUT /api (genapi.h) with a JSON body of at most max_body bytes (a larger
 * declared Content-Length is answered 413 before the body is read; a larger chunked
 * body is discarded and answered 413). Another method on /api is 405 with "Allow:
 * PUT"; the paths openai.h claims (/v1/...) go to OpenAI's API there, answered and
 * refused in OpenAI's shape; any other path is 404. Every answer is JSON ({"error":
 * "..."} for the errors), except what libmicrohttpd answers itself before a request
 * reaches us: a Content-Length that is not a decimal number (400) or does not fit 64 bits
 * (413), a header over its memory limit (431), and those bodies are its own short HTML.
 *
 * Hostile clients: a small pool of threads polls the connections with epoll (poll where
 * there is none; never select, which stops at 1,024 descriptors); a connection silent for
 * timeout_s seconds is closed, whatever its state (a slowloris client that never finishes
 * its headers included); at most max_conns connections are open at once (beyond that new
 * clients wait in the kernel's listen queue until a slot frees). Start raises the soft
 * limit on open files to the hard one and lowers max_conns to fit under it, saying so.
 * A mutex guards the model, so requests run one at a time. The caller owns the lifetime:
 * start, wait for a signal, stop. */
#ifndef MT_GENSERVER_H
#define MT_GENSERVER_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "infer/generate.h"

struct mt_genserver_opts {
	const char *host;     /* address to bind (numeric IPv4 or IPv6); "127.0.0.1" by default */
	int port;
	size_t max_body;      /* bytes */
	uint64_t seed;        /* when a request has no random_seed */
	const char *model;    /* the model's id on /v1/models; NULL: "mt" */
	unsigned timeout_s;   /* close a connection silent this long; 0: MT_GENSERVER_TIMEOUT */
	unsigned max_conns;   /* open connections at most; 0: MT_GENSERVER_MAX_CONNS */
};

#define MT_GENSERVER_TIMEOUT 10
#define MT_GENSERVER_MAX_CONNS 16384
#define MT_GENSERVER_THREADS 4

struct mt_genserver;

int mt_genserver_start(struct mt_genserver **s, struct mt_gen *g, const struct mt_genserver_opts *o,
		       struct mt_err *err);
/* The connection limit in force (max_conns after fitting it under the open-file limit). */
unsigned mt_genserver_max_conns(const struct mt_genserver *s);
/* Finish the request being served, close the socket, free. */
void mt_genserver_stop(struct mt_genserver *s);

#endif
