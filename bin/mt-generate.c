/* mt-generate: generate text from a checkpoint, from prompts on the command line, in a
 * file or on stdin, or as a server with Megatron's REST interface. The model, the KV
 * cache (infer.h), sampling (sample.h), the generation loop (generate.h) and the
 * server (genapi.h, genserver.h) live in lib/. */
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "infer/genapi.h"
#include "infer/generate.h"
#include "infer/genserver.h"
#include "infer/infer.h"
#include "base/input.h"
#include "base/log.h"
#include "ckpt/model.h"
#include "text/tokenizer.h"
#include "tool.h"

static const char *const synopsis[] = {
	"--load CKPT [--device cuda|cpu] [--fp32] [--max-tokens N] [--temperature T] [--top-k K | --top-p P] [--seed N] [--stop STR]... [--json [--logprobs]] [PROMPT...]",
	"--load CKPT [options] --prompts-file FILE [--jsonl]",
	"--load CKPT [--host ADDR] [--served-model-name NAME] --server PORT",
	NULL,
};

static const struct mt_tool_info info = {
	.name = "mt-generate",
	.summary = "generate text from a checkpoint",
	.synopsis = synopsis,
	.description = "prompts come from the arguments, --prompts-file, or stdin (one a line); output is each\n"
		       "prompt followed by its generation, or JSON lines with --json",
	.doc = "docs/mt-generate.md",
};

enum {
	O_LOAD = 256, O_MAX_TOKENS, O_TEMP, O_TOP_K, O_TOP_P, O_SEED, O_STOP, O_FILE, O_JSONL, O_JSON, O_LOGPROBS,
	O_BATCH, O_EOD, O_SERVER, O_HOST, O_MAX_BODY, O_MODEL_NAME, O_SRV_TIMEOUT, O_SRV_CONNS, O_TOK_TYPE, O_VOCAB, O_MERGES,
	O_TOK_MODEL, O_DEVICE, O_BF16, O_FP32,
};

static const struct mt_option opts[] = {
	{ "load", 0, MT_ARG_REQUIRED, O_LOAD, "CKPT", "checkpoint directory, iteration directory or .h5 file" },
	{ "max-tokens", 0, MT_ARG_REQUIRED, O_MAX_TOKENS, "N", "tokens to generate per prompt (Megatron's tokens_to_generate; default 64)" },
	{ "temperature", 0, MT_ARG_REQUIRED, O_TEMP, "T", "0 greedy, up to 100 (default 1.0)" },
	{ "top-k", 0, MT_ARG_REQUIRED, O_TOP_K, "K", "sample from the K most likely tokens (0 off, 1 greedy)" },
	{ "top-p", 0, MT_ARG_REQUIRED, O_TOP_P, "P", "sample from the nucleus of mass P (0 off)" },
	{ "seed", 0, MT_ARG_REQUIRED, O_SEED, "N", "random seed (default 1234); results do not depend on batching" },
	{ "stop", 0, MT_ARG_REQUIRED, O_STOP, "STR", "stop when the generated text contains STR (repeatable)" },
	{ "prompts-file", 0, MT_ARG_REQUIRED, O_FILE, "FILE", "prompts, one a line (empty lines skipped); - for stdin" },
	{ "jsonl", 0, MT_ARG_NONE, O_JSONL, NULL, "the prompts are JSON lines with a \"prompt\" or \"text\" string" },
	{ "json", 0, MT_ARG_NONE, O_JSON, NULL, "output JSON lines: prompt, text, tokens, finish_reason" },
	{ "logprobs", 0, MT_ARG_NONE, O_LOGPROBS, NULL, "with --json, log-probabilities of prompt and generated tokens" },
	{ "device", 0, MT_ARG_REQUIRED, O_DEVICE, "DEV", "cuda or cpu (default: cuda when a GPU is visible)" },
	{ "bf16", 0, MT_ARG_NONE, O_BF16, NULL, "cuda: bf16 weights, activations and cache (the default on cuda)" },
	{ "fp32", 0, MT_ARG_NONE, O_FP32, NULL, "cuda: fp32 weights, activations and cache (the CPU always computes in fp32)" },
	{ "batch-size", 0, MT_ARG_REQUIRED, O_BATCH, "N", "prompts run together (default 32; the server's 8)" },
	{ "eod-id", 0, MT_ARG_REQUIRED, O_EOD, "ID", "stop at this id instead of the tokenizer's end of document (-1: never)" },
	{ "server", 0, MT_ARG_REQUIRED, O_SERVER, "PORT", "serve PUT /api (Megatron's REST interface) and OpenAI's /v1/completions until SIGTERM or SIGINT" },
	{ "served-model-name", 0, MT_ARG_REQUIRED, O_MODEL_NAME, "NAME", "the model's id on /v1/models (default: the checkpoint directory's name)" },
	{ "host", 0, MT_ARG_REQUIRED, O_HOST, "ADDR", "address the server binds (default 127.0.0.1)" },
	{ "max-body-bytes", 0, MT_ARG_REQUIRED, O_MAX_BODY, "N", "largest request body the server reads (default 1048576)" },
	{ "server-timeout", 0, MT_ARG_REQUIRED, O_SRV_TIMEOUT, "S", "close a connection silent for S seconds (default 10)" },
	{ "server-max-connections", 0, MT_ARG_REQUIRED, O_SRV_CONNS, "N", "connections open at once at most (default 16384)" },
	{ "tokenizer-type", 0, MT_ARG_REQUIRED, O_TOK_TYPE, "TYPE", "override the checkpoint's tokenizer" },
	{ "vocab-file", 0, MT_ARG_REQUIRED, O_VOCAB, "FILE", "override the checkpoint's tokenizer file" },
	{ "merge-file", 0, MT_ARG_REQUIRED, O_MERGES, "FILE", "override the checkpoint's tokenizer file" },
	{ "tokenizer-model", 0, MT_ARG_REQUIRED, O_TOK_MODEL, "FILE", "override the checkpoint's tokenizer file" },
	{ 0 },
};

struct args {
	const char *load, *file, *host, *model_name;
	int jsonl, json, logprobs, batch, port, quiet, eod_set;
	int device_cuda, bf16, fp32;   /* device_cuda -1: cuda when a GPU is visible */
	int32_t eod;
	long long max_body;
	unsigned srv_timeout, srv_conns;
	struct mt_gen_opts g;
	const char **stop;
	int nstop;
	char **prompts;      /* strings (the file's too) */
	size_t *plen;
	int nprompts, cap;
	struct mt_tokenizer_args tok;
};

static void add_prompt(struct args *a, const char *s, size_t n)
{
	if (a->nprompts == a->cap) {
		a->cap = a->cap ? 2 * a->cap : 16;
		a->prompts = realloc(a->prompts, (size_t)a->cap * sizeof(*a->prompts));
		a->plen = realloc(a->plen, (size_t)a->cap * sizeof(*a->plen));
		if (!a->prompts || !a->plen)
			mt_die(MT_EXIT_IO, "out of memory");
	}
	if (!(a->prompts[a->nprompts] = malloc(n + 1)))
		mt_die(MT_EXIT_IO, "out of memory");
	memcpy(a->prompts[a->nprompts], s, n);
	a->prompts[a->nprompts][n] = '\0';
	a->plen[a->nprompts++] = n;
}

/* prompts from a file or stdin: lines, or JSON lines with "prompt" or "text" */
static void read_prompts(struct args *a, const char *path)
{
	struct mt_input *in;
	struct mt_err e = { 0 };
	char *line;
	size_t len;
	int64_t lineno = 0;
	int r;

	if (mt_input_open(&in, path, &e) || mt_input_next(in, &e) < 0)
		mt_die_err(&e);
	while ((r = mt_input_getline(in, &line, &len, &e)) == 1) {
		lineno++;
		if (len && line[len - 1] == '\r')
			len--;
		if (!len)
			continue;
		if (a->jsonl) {
			json_error_t je;
			json_t *j = json_loadb(line, len, 0, &je), *p;
			p = json_is_object(j) ? json_object_get(j, "prompt") : NULL;
			if (!p && json_is_object(j))
				p = json_object_get(j, "text");
			if (!json_is_string(p))
				mt_die(MT_EXIT_DATA, "bad prompt '%s' line %lld: %s", mt_input_name(in), (long long)lineno,
				       j ? "want an object with a \"prompt\" or \"text\" string" : je.text);
			if (json_string_length(p))
				add_prompt(a, json_string_value(p), json_string_length(p));
			json_decref(j);
		} else {
			add_prompt(a, line, len);
		}
	}
	if (r < 0)
		mt_die_err(&e);
	mt_input_close(in);
}

static void parse(struct mt_opt *o, struct args *a, int argc, char **argv)
{
	int id;
	double v;

	memset(a, 0, sizeof(*a));
	a->g.max_tokens = 64;
	a->g.sp.temperature = 1.0;
	a->g.seed = 1234;
	a->max_body = 1 << 20;
	a->port = -1;
	a->host = "127.0.0.1";
	a->device_cuda = -1;
	if (mt_opt_init(o, &info, opts, argc, argv))
		mt_die_err(&o->err);
	while ((id = mt_opt_next(o)) != MT_OPT_END) {
		mt_tool_common(o, id);
		switch (id) {
		case MT_OPT_ARG: add_prompt(a, o->arg, strlen(o->arg)); break;
		case O_LOAD: a->load = o->arg; break;
		case O_MAX_TOKENS: a->g.max_tokens = (int)mt_tool_num(o, 0, 1 << 24); break;
		case O_TEMP:
			v = mt_tool_real(o);
			if (!(v >= 0 && v <= 100))
				mt_die_usage(o, "--temperature must be from 0 (greedy) to 100");
			a->g.sp.temperature = v;
			break;
		case O_TOP_K: a->g.sp.top_k = (int)mt_tool_num(o, 0, 1 << 30); break;
		case O_TOP_P:
			v = mt_tool_real(o);
			if (!(v >= 0 && v <= 1))
				mt_die_usage(o, "--top-p must be from 0 to 1");
			a->g.sp.top_p = v;
			break;
		case O_SEED: a->g.seed = (uint64_t)mt_tool_num(o, 0, INT64_MAX); break;
		case O_STOP:
			if (!*o->arg)
				mt_die_usage(o, "--stop needs a non-empty string");
			a->stop = realloc(a->stop, (size_t)(a->nstop + 1) * sizeof(*a->stop));
			a->stop[a->nstop++] = o->arg;
			break;
		case O_FILE: a->file = o->arg; break;
		case O_JSONL: a->jsonl = 1; break;
		case O_JSON: a->json = 1; break;
		case O_LOGPROBS: a->logprobs = 1; break;
		case O_BATCH: a->batch = (int)mt_tool_num(o, 1, 4096); break;
		case O_EOD:
			a->eod = (int32_t)mt_tool_num(o, -1, INT32_MAX);
			a->eod_set = 1;
			break;
		case O_SERVER: a->port = (int)mt_tool_num(o, 0, 65535); break;
		case O_HOST: a->host = o->arg; break;
		case O_MODEL_NAME: a->model_name = o->arg; break;
		case O_MAX_BODY: a->max_body = mt_tool_num(o, 16, 1LL << 32); break;
		case O_SRV_TIMEOUT: a->srv_timeout = (unsigned)mt_tool_num(o, 1, 86400); break;
		case O_SRV_CONNS: a->srv_conns = (unsigned)mt_tool_num(o, 4, 1 << 20); break;
		case O_TOK_TYPE: a->tok.type = o->arg; break;
		case O_VOCAB: a->tok.vocab_file = o->arg; break;
		case O_MERGES: a->tok.merge_file = o->arg; break;
		case O_TOK_MODEL: a->tok.tokenizer_model = o->arg; break;
		case O_DEVICE:
			if (!strcmp(o->arg, "cpu"))
				a->device_cuda = 0;
			else if (!strcmp(o->arg, "cuda"))
				a->device_cuda = 1;
			else
				mt_die_usage(o, "--device must be cuda or cpu, not '%s'", o->arg);
			break;
		case O_BF16: a->bf16 = 1; break;
		case O_FP32: a->fp32 = 1; break;
		default: break;
		}
	}
	a->quiet = o->quiet;
	if (!a->load)
		mt_die_usage(o, "--load CKPT is required");
	if (a->g.sp.top_k > 1 && a->g.sp.top_p > 0)
		mt_die_usage(o, "--top-k and --top-p cannot be used together (Megatron's rule)");
	if (a->logprobs && !a->json && a->port < 0)
		mt_die_usage(o, "--logprobs needs --json");
	if (a->port >= 0 && (a->nprompts || a->file))
		mt_die_usage(o, "--server takes its prompts from requests, not from arguments or --prompts-file");
	if (a->nprompts && a->file)
		mt_die_usage(o, "prompts as arguments and --prompts-file together");
	if (a->bf16 && a->fp32)
		mt_die_usage(o, "--bf16 and --fp32 cannot be used together");
	if (a->device_cuda < 0)
		a->device_cuda = mt_backend_cuda_usable();
	if (!a->device_cuda && a->bf16)
		mt_die_usage(o, "--bf16 needs --device cuda (the CPU computes in fp32)");
	a->g.stop = a->stop;
	a->g.nstop = a->nstop;
	a->g.logprobs = a->logprobs;
}

static const char *engine_name(const struct args *a)
{
	return !a->device_cuda ? "cpu fp32" : a->fp32 ? "cuda fp32" : "cuda bf16";
}

/* the engine: on the GPU in bf16 unless --fp32, or the CPU's; reported on stderr */
static void engine_start(const struct args *a, struct mt_infer *e, struct mt_model *m, int batch, int maxlen)
{
	const struct mt_infer_ops *ops = !a->device_cuda ? &mt_infer_cpu : a->fp32 ? &mt_infer_cuda_fp32 : &mt_infer_cuda;
	struct mt_err err = { 0 };
	size_t cache;

	if (ops->init(e, &m->cfg, &m->params, m->w, batch, maxlen, &err))
		mt_die_err(&err);
	cache = a->device_cuda ? mt_infer_cuda_cache_bytes(e) : mt_infer_cache_bytes(&m->cfg, batch, maxlen);
	mt_info("engine: %s, batch %d, %d positions, %zu MiB%s (key/value cache %zu MiB)", engine_name(a), batch, maxlen,
		e->ops->bytes(e) >> 20, a->device_cuda ? " on the GPU" : "", cache >> 20);
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void out_write(const void *p, size_t n)
{
	if (n && fwrite(p, 1, n, stdout) != n)
		mt_die(MT_EXIT_IO, "cannot write to stdout");
}

static int serve(struct args *a, struct mt_gen *g)
{
	struct mt_genserver *s;
	struct mt_genserver_opts so = { .host = a->host, .port = a->port, .max_body = (size_t)a->max_body,
					.seed = a->g.seed, .model = a->model_name, .timeout_s = a->srv_timeout,
					.max_conns = a->srv_conns };
	struct mt_err e = { 0 };
	sigset_t set;
	int sig;
	char name[256];

	if (!so.model) { /* the checkpoint directory's name, not an iteration directory's or a file's */
		char *abs = realpath(a->load, NULL);
		const char *p = abs ? abs : a->load, *b;
		size_t n = strlen(p);
		while (n > 1 && p[n - 1] == '/')
			n--;
		for (int up = 0; up < 2; up++) {
			b = memrchr(p, '/', n);
			b = b ? b + 1 : p;
			if (up == 0 && (!strncmp(b, "iter_", 5) || (n - (size_t)(b - p) > 3 && !memcmp(p + n - 3, ".h5", 3))) &&
			    b > p + 1)
				n = (size_t)(b - p) - 1;
			else
				break;
		}
		b = memrchr(p, '/', n);
		b = b ? b + 1 : p;
		snprintf(name, sizeof(name), "%.*s", (int)(n - (size_t)(b - p)), b);
		so.model = name;
		free(abs);
	}

	/* the server's thread inherits this mask, so only sigwait below sees the signals */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	if (mt_genserver_start(&s, g, &so, &e))
		mt_die_err(&e);
	mt_info("serving PUT /api and OpenAI's /v1/completions (model '%s') on http://%s%s%s:%d (batch %d, %d positions, "
		"bodies up to %lld bytes)", so.model, strchr(a->host, ':') ? "[" : "", a->host, strchr(a->host, ':') ? "]" : "",
		a->port, g->e->max_batch, g->e->max_len, a->max_body);
	sigwait(&set, &sig);
	mt_info("%s: stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
	mt_genserver_stop(s);
	return MT_EXIT_OK;
}

int main(int argc, char **argv)
{
	struct mt_opt o;
	struct args a;
	struct mt_model m;
	struct mt_tokenizer tk;
	struct mt_infer e;
	struct mt_gen g;
	struct mt_err err = { 0 };
	struct mt_gen_out *outs;
	int maxlen = 0, batch, rc = MT_EXIT_OK;
	int64_t generated = 0;
	double t0;

	mt_tool_start(&info);
	parse(&o, &a, argc, argv);
	mt_log_set_level(a.quiet ? MT_LOG_WARN : MT_LOG_INFO);
	if (a.port < 0 && !a.nprompts)
		read_prompts(&a, a.file ? a.file : "-");
	if (mt_model_open(&m, a.load, &err))
		mt_die_err(&err);
	if (mt_model_tokenizer_args(&m, &a.tok, &err) || mt_tokenizer_load(&tk, &a.tok, &err))
		mt_die_err(&err);
	if (a.port >= 0) {
		batch = a.batch ? a.batch : 8;
		engine_start(&a, &e, &m, batch, m.cfg.max_position_embeddings);
		if (mt_gen_init(&g, &e, &tk, &err))
			mt_die_err(&err);
		if (a.eod_set)
			g.eod = a.eod;
		rc = serve(&a, &g);
		goto out;
	}
	if (!a.nprompts)
		mt_die(MT_EXIT_DATA, "no prompts: give them as arguments, with --prompts-file, or on stdin");
	if (mt_sample_check(&a.g.sp, &err))
		mt_die(MT_EXIT_USAGE, "%s", err.msg);
	/* tokenize every prompt first: the cache is planned for the longest */
	outs = calloc((size_t)a.nprompts, sizeof(*outs));
	{
		struct mt_bpe bpe;
		if (!outs || mt_bpe_init(&bpe, &tk.vocab, &tk.pretok, &err))
			mt_die(MT_EXIT_IO, "out of memory");
		for (int i = 0; i < a.nprompts; i++) {
			if (mt_gen_encode(&bpe, a.prompts[i], a.plen[i], &outs[i], &err))
				mt_die(err.code, "prompt %d: %s", i + 1, err.msg);
			if (outs[i].nprompt + a.g.max_tokens > maxlen)
				maxlen = outs[i].nprompt + a.g.max_tokens;
			if (outs[i].nprompt + a.g.max_tokens > m.cfg.max_position_embeddings)
				mt_die(MT_EXIT_DATA, "prompt %d: %d tokens + --max-tokens %d exceed the model's %d positions", i + 1,
				       outs[i].nprompt, a.g.max_tokens, m.cfg.max_position_embeddings);
		}
		mt_bpe_free(&bpe);
	}
	batch = a.batch ? a.batch : 32;
	if (batch > a.nprompts)
		batch = a.nprompts;
	engine_start(&a, &e, &m, batch, maxlen);
	if (mt_gen_init(&g, &e, &tk, &err))
		mt_die_err(&err);
	if (a.eod_set)
		g.eod = a.eod;
	t0 = now();
	for (int b0 = 0; b0 < a.nprompts; b0 += batch) {
		int nb = a.nprompts - b0 < batch ? a.nprompts - b0 : batch;
		if (mt_gen_run(&g, &a.g, outs + b0, nb, b0, &err))
			mt_die_err(&err);
		for (int i = b0; i < b0 + nb; i++) {
			generated += outs[i].n;
			if (a.json) {
				json_t *j = mt_genapi_result(&outs[i], a.prompts[i], a.plen[i], a.logprobs);
				char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
				if (!s)
					mt_die(MT_EXIT_IO, "out of memory");
				out_write(s, strlen(s));
				out_write("\n", 1);
				free(s);
				json_decref(j);
			} else {
				out_write(a.prompts[i], a.plen[i]);
				out_write(outs[i].text, outs[i].text_len);
				out_write("\n", 1);
			}
			mt_gen_out_free(&outs[i]);
		}
		if (fflush(stdout))
			mt_die(MT_EXIT_IO, "cannot write to stdout");
	}
	{
		double dt = now() - t0;
		mt_info("%d prompt%s, %lld tokens generated in %.2f s (%.1f tokens/s, batch %d, %s)", a.nprompts,
			a.nprompts == 1 ? "" : "s", (long long)generated, dt, dt > 0 ? (double)generated / dt : 0.0, batch,
			engine_name(&a));
	}
	free(outs);
out:
	mt_gen_free(&g);
	e.ops->free(&e);
	mt_tokenizer_free(&tk);
	mt_model_close(&m);
	for (int i = 0; i < a.nprompts; i++)
		free(a.prompts[i]);
	free(a.prompts);
	free(a.plen);
	free(a.stop);
	mt_opt_free(&o);
	return rc;
}
