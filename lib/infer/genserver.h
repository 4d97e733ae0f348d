/* genserver.h: Megatron's text generation REST interface over HTTP (libmicrohttpd).
 *
 * Megatron's route: PUT /api (genapi.h) with a JSON body of at most max_body bytes (a larger
 * declared Content-Length is answered 413 before the body is read; a larger chunked
 * body is discarded and answered 413). Another method on /api is 405 with "Allow:
 * PUT"; the paths openai.h claims (/v1/...) go to OpenAI's API there, answered and
 * refused in OpenAI's shape; any other path is 404. Every answer is JSON ({"error":
 * "..."} for the errors).
 * One thread serves the connections and a mutex guards the model, so requests run one
 * at a time. The caller owns the lifetime: start, wait for a signal, stop. */
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
};

struct mt_genserver;

int mt_genserver_start(struct mt_genserver **s, struct mt_gen *g, const struct mt_genserver_opts *o,
		       struct mt_err *err);
/* Finish the request being served, close the socket, free. */
void mt_genserver_stop(struct mt_genserver *s);

#endif
