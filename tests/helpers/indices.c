/* indices: read configurations on stdin and print Megatron's index arrays as
 * lib/data/gptsamples.c and lib/data/blend.c build them, in the text format of
 * tests/reference/megatron_indices.py, each answer ended by a line "end":
 *   gpt L N SEED X DROP len0,len1,...     (N = -1 for None)
 *   blend SIZE w0,w1,...                  (weights normalized as numpy does)
 *   exhaustive n0,n1,...                  */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../bin/tool.h"
#include "data/blend.h"
#include "data/gptsamples.h"

static const struct mt_tool_info info = { "indices", "test helper", NULL, NULL, NULL };

static void arr32(const char *name, const char *dt, const int32_t *a, int64_t n)
{
	printf("%s %s", name, dt);
	for (int64_t i = 0; i < n; i++)
		printf(" %d", a[i]);
	putchar('\n');
}

static void arr64(const char *name, const char *dt, const int64_t *a, int64_t n)
{
	printf("%s %s", name, dt);
	for (int64_t i = 0; i < n; i++)
		printf(" %lld", (long long)a[i]);
	putchar('\n');
}

static void arru32(const char *name, const uint32_t *a, int64_t n)
{
	printf("%s uint32", name);
	for (int64_t i = 0; i < n; i++)
		printf(" %u", a[i]);
	putchar('\n');
}

static int parse_list(char *s, double *out, int max)
{
	int n = 0;
	for (char *t = strtok(s, ","); t && n < max; t = strtok(NULL, ","))
		out[n++] = strtod(t, NULL);
	return n;
}

int main(void)
{
	static char line[1 << 22];
	static double v[1 << 18];
	struct mt_err e = { 0 };

	mt_tool_start(&info);
	while (fgets(line, sizeof(line), stdin)) {
		char kind[16], *rest;
		int k;

		line[strcspn(line, "\n")] = '\0';
		if (sscanf(line, "%15s", kind) != 1)
			continue;
		rest = line + strlen(kind);
		if (!strcmp(kind, "gpt")) {
			long long L, N, seed, X, drop;
			int off, n;
			int32_t *lens;
			struct mt_gpt_indices x;
			struct mt_gpt_params p;
			if (sscanf(rest, "%lld %lld %lld %lld %lld %n", &L, &N, &seed, &X, &drop, &off) != 5)
				mt_die(MT_EXIT_USAGE, "bad line: %s", line);
			n = parse_list(rest + off, v, 1 << 18);
			lens = malloc((size_t)n * sizeof(*lens));
			for (k = 0; k < n; k++)
				lens[k] = (int32_t)v[k];
			p = (struct mt_gpt_params){ N, L, (uint32_t)seed, (int)X, (int)drop };
			if (mt_gpt_build(lens, 0, n, &p, &x, &e)) {
				printf("error\nend\n");
				free(lens);
				continue;
			}
			printf("tokens_per_epoch %lld\nnum_epochs %lld\nseparate_final_epoch %d\n", (long long)x.tokens_per_epoch,
			       (long long)x.epochs, x.separate_final_epoch);
			arr32("document_index", "int32", x.doc, x.ndoc);
			if (x.sample_i64)
				arr64("sample_index", "int64", x.sample, 2 * (x.nsample + 1));
			else
				arr32("sample_index", "int32", x.sample, 2 * (x.nsample + 1));
			if (x.shuffle_i64)
				arr64("shuffle_index", "int64", x.shuffle, x.nshuffle);
			else
				arru32("shuffle_index", x.shuffle, x.nshuffle);
			mt_gpt_indices_free(&x);
			free(lens);
		} else if (!strcmp(kind, "blend") || !strcmp(kind, "exhaustive")) {
			long long size = 0;
			int off = 0, n, wide;
			void *di;
			int64_t *si, total;
			if (!strcmp(kind, "blend") && sscanf(rest, "%lld %n", &size, &off) != 1)
				mt_die(MT_EXIT_USAGE, "bad line: %s", line);
			n = parse_list(rest + off, v, 1 << 18);
			if (!strcmp(kind, "blend")) {
				mt_blend_normalize(v, n);
				if (mt_blend_indices(v, n, size, &di, &wide, &si, &e))
					mt_die_err(&e);
				total = size;
			} else {
				int64_t *cnt = malloc((size_t)n * sizeof(*cnt));
				for (k = 0; k < n; k++)
					cnt[k] = (int64_t)v[k];
				if (mt_blend_indices_exhaustive(cnt, n, &di, &wide, &si, &total, &e))
					mt_die_err(&e);
				free(cnt);
			}
			printf("dataset_index %s", wide ? "int32" : "int16");
			for (int64_t i = 0; i < total; i++)
				printf(" %d", wide ? ((int32_t *)di)[i] : ((int16_t *)di)[i]);
			putchar('\n');
			arr64("dataset_sample_index", "int64", si, total);
			free(di);
			free(si);
		} else {
			mt_die(MT_EXIT_USAGE, "unknown kind '%s'", kind);
		}
		printf("end\n");
	}
	return fflush(stdout) ? MT_EXIT_IO : 0;
}
