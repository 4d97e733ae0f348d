/* jsonl.c: JSON lines on jansson (see jsonl.h). */
#include "base/jsonl.h"

#include <stdlib.h>
#include <string.h>

void mt_jsonl_init(struct mt_jsonl *r, struct mt_input *in)
{
	r->in = in;
	r->lineno = 0;
}

int mt_jsonl_parse(const struct mt_jsonl *r, const char *line, size_t len, json_t **value,
		   struct mt_err *err)
{
	json_error_t je;

	/* JSON_ALLOW_NUL: "\u0000" inside strings is valid JSON text */
	*value = json_loadb(line, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
	if (!*value)
		return mt_err_set(err, MT_EXIT_DATA, "invalid JSON at '%s':%lld:%d: %s",
				  mt_input_member(r->in), (long long)r->lineno, je.column, je.text);
	return 0;
}

static int blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
			return 0;
	return 1;
}

int mt_jsonl_next(struct mt_jsonl *r, json_t **value, struct mt_err *err)
{
	char *line;
	size_t len;
	int g;

	while ((g = mt_input_getline(r->in, &line, &len, err)) == 1) {
		r->lineno++;
		if (blank(line, len))
			continue;
		return mt_jsonl_parse(r, line, len, value, err) ? -1 : 1;
	}
	return g;
}

int mt_jsonl_get_text(json_t *obj, const char *key, const char ***parts, size_t **lens,
		      struct mt_err *err)
{
	json_t *v;
	size_t n, i;

	*parts = NULL;
	*lens = NULL;
	if (!json_is_object(obj))
		return mt_err_set(err, MT_EXIT_DATA, "line is not a JSON object");
	v = json_object_get(obj, key);
	if (!v)
		return mt_err_set(err, MT_EXIT_DATA, "key '%s' not found", key);
	if (json_is_string(v)) {
		n = 1;
	} else if (json_is_array(v)) {
		n = json_array_size(v);
	} else {
		return mt_err_set(err, MT_EXIT_DATA, "key '%s' is neither a string nor a list of strings", key);
	}
	*parts = malloc((n ? n : 1) * sizeof(**parts));
	*lens = malloc((n ? n : 1) * sizeof(**lens));
	if (!*parts || !*lens) {
		free(*parts);
		free(*lens);
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	}
	for (i = 0; i < n; i++) {
		json_t *s = json_is_string(v) ? v : json_array_get(v, i);
		if (!json_is_string(s)) {
			free(*parts);
			free(*lens);
			*parts = NULL;
			*lens = NULL;
			return mt_err_set(err, MT_EXIT_DATA, "key '%s': item %zu of the list is not a string", key, i);
		}
		(*parts)[i] = json_string_value(s);
		(*lens)[i] = json_string_length(s);
	}
	return (int)n;
}
