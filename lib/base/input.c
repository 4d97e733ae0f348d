/* input.c: plain, compressed and archived inputs through libarchive (see input.h).
 *
 * Every read goes through libarchive with all its decompression filters, the
 * archive formats, and the "raw" format for a single (possibly compressed)
 * stream. mtree is left out on purpose: its detector accepts some plain text.
 * Lines are cut from a private buffer that grows to the longest line seen, or up to a
 * cap past which a line is read through without being kept. */
#include "base/input.h"

#include "base/log.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MT_INPUT_BLOCK (1 << 20)

struct mt_input {
	char *name;        /* for messages */
	struct archive *a;
	int is_archive;
	int pending;       /* a header was read at open and not handed out yet */
	int at_end;        /* no more members */
	int in_member;
	int member_eof;
	char *member;      /* current member path */
	int64_t size;
	/* line reader */
	char *buf;
	size_t cap, beg, end;
	size_t max_line;   /* 0: none */
};

void mt_input_set_max_line(struct mt_input *in, size_t max) { in->max_line = max; }

static int arc_err(struct mt_input *in, struct mt_err *err, const char *what)
{
	const char *m = archive_error_string(in->a);
	int e = archive_errno(in->a);
	/* the system failed us (missing file, permissions, disk) or the data is bad */
	int code = e == ENOENT || e == EACCES || e == EIO || e == ENOMEM || e == EISDIR || e == EPERM
		   ? MT_EXIT_IO : MT_EXIT_DATA;

	/* libarchive sometimes has no words for a stream cut short near its end */
	if (!m || !*m)
		m = "corrupt or truncated data";
	if (in->is_archive && in->member)
		return mt_err_set(err, code, "%s '%s' (member '%s'): %s", what, in->name, in->member, m);
	return mt_err_set(err, code, "%s '%s': %s", what, in->name, m);
}

static int read_header(struct mt_input *in, struct mt_err *err)
{
	struct archive_entry *e;

	for (;;) {
		int r = archive_read_next_header(in->a, &e);
		int fmt = archive_format(in->a);

		if (fmt && fmt != ARCHIVE_FORMAT_RAW && fmt != ARCHIVE_FORMAT_EMPTY)
			in->is_archive = 1;
		if (r == ARCHIVE_EOF) {
			in->at_end = 1;
			return 0;
		}
		if (r < ARCHIVE_WARN)
			return arc_err(in, err, "cannot read");
		if (in->is_archive && archive_entry_filetype(e) != AE_IFREG)
			continue; /* directories, links, devices hold no text */
		free(in->member);
		in->member = strdup(in->is_archive ? archive_entry_pathname(e) : in->name);
		if (!in->member)
			return mt_err_set(err, MT_EXIT_IO, "out of memory");
		return 1;
	}
}

int mt_input_open(struct mt_input **out, const char *path, struct mt_err *err)
{
	struct mt_input *in;
	struct stat st;
	int r, stdin_ = strcmp(path, "-") == 0;

	*out = NULL;
	in = calloc(1, sizeof(*in));
	if (!in)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	in->name = strdup(stdin_ ? "<stdin>" : path);
	in->a = archive_read_new();
	in->size = -1;
	if (!in->name || !in->a) {
		mt_input_close(in);
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	}
	if (!stdin_) {
		if (stat(path, &st) != 0) {
			mt_err_errno(err, MT_EXIT_IO, "cannot open '%s'", path);
			mt_input_close(in);
			return -1;
		}
		if (S_ISDIR(st.st_mode)) {
			mt_err_set(err, MT_EXIT_IO, "cannot open '%s': is a directory", path);
			mt_input_close(in);
			return -1;
		}
		if (S_ISREG(st.st_mode))
			in->size = (int64_t)st.st_size;
	}
	archive_read_support_filter_all(in->a);
	archive_read_support_format_7zip(in->a);
	archive_read_support_format_ar(in->a);
	archive_read_support_format_cab(in->a);
	archive_read_support_format_cpio(in->a);
	archive_read_support_format_iso9660(in->a);
	archive_read_support_format_lha(in->a);
	archive_read_support_format_rar(in->a);
	archive_read_support_format_rar5(in->a);
	archive_read_support_format_tar(in->a);
	archive_read_support_format_xar(in->a);
	archive_read_support_format_zip(in->a);
	archive_read_support_format_empty(in->a);
	archive_read_support_format_raw(in->a);
	r = stdin_ ? archive_read_open_fd(in->a, 0, MT_INPUT_BLOCK)
		   : archive_read_open_filename(in->a, path, MT_INPUT_BLOCK);
	if (r != ARCHIVE_OK) {
		arc_err(in, err, "cannot read");
		mt_input_close(in);
		return -1;
	}
	r = read_header(in, err);
	if (r < 0) {
		mt_input_close(in);
		return -1;
	}
	in->pending = r == 1;
	if (r == 0 && in->is_archive)
		/* an empty tar is nothing but zero blocks, so a file that starts
		 * with 1024 NUL bytes reads as one: say so rather than stay silent */
		mt_warn("'%s' holds no files (an empty archive, or data that starts with 1024 zero bytes)",
			in->name);
	if (r == 0 && !in->is_archive) {
		/* an empty file is one empty member, like any other plain file */
		in->member = strdup(in->name);
		in->pending = 1;
		in->member_eof = 1;
		in->at_end = 0;
	}
	*out = in;
	return 0;
}

void mt_input_close(struct mt_input *in)
{
	if (!in)
		return;
	if (in->a)
		archive_read_free(in->a);
	free(in->name);
	free(in->member);
	free(in->buf);
	free(in);
}

int mt_input_next(struct mt_input *in, struct mt_err *err)
{
	int r;

	in->beg = in->end = 0;
	if (in->pending) {
		in->pending = 0;
		in->in_member = 1;
		return 1;
	}
	in->in_member = 0;
	if (in->at_end || !in->is_archive) {
		in->at_end = 1;
		return 0;
	}
	in->member_eof = 0;
	r = read_header(in, err);
	if (r == 1)
		in->in_member = 1;
	return r;
}

ssize_t mt_input_read(struct mt_input *in, void *buf, size_t n, struct mt_err *err)
{
	la_ssize_t r;

	if (!in->in_member || in->member_eof)
		return 0;
	r = archive_read_data(in->a, buf, n);
	if (r < 0)
		return arc_err(in, err, "cannot read");
	if (r == 0)
		in->member_eof = 1;
	return (ssize_t)r;
}

int mt_input_getline(struct mt_input *in, char **line, size_t *len, struct mt_err *err)
{
	size_t scan = in->beg;

	for (;;) {
		/* no memchr on the NULL buffer of a stream not read yet */
		char *nl = in->end > scan ? memchr(in->buf + scan, '\n', in->end - scan) : NULL;
		ssize_t r;

		if (nl) {
			*line = in->buf + in->beg;
			*len = (size_t)(nl - *line);
			*nl = '\0';
			in->beg = (size_t)(nl - in->buf) + 1;
			return 1;
		}
		if (in->member_eof || !in->in_member) {
			if (in->beg == in->end)
				return 0;
			/* last line without '\n': terminate it in place */
			if (in->end == in->cap) {
				char *nb = realloc(in->buf, in->cap + 1);
				if (!nb)
					return mt_err_set(err, MT_EXIT_IO, "out of memory");
				in->buf = nb;
				in->cap++;
			}
			in->buf[in->end] = '\0';
			*line = in->buf + in->beg;
			*len = in->end - in->beg;
			in->beg = in->end;
			return 1;
		}
		/* a line over the cap: read through to its end, keeping nothing */
		if (in->max_line && in->end - in->beg > in->max_line) {
			size_t seen = in->end - in->beg;
			for (;;) {
				in->beg = in->end = 0;
				r = mt_input_read(in, in->buf, in->cap, err);
				if (r < 0)
					return -1;
				in->end = (size_t)r;
				nl = r ? memchr(in->buf, '\n', in->end) : NULL;
				if (nl || r == 0) {
					seen += nl ? (size_t)(nl - in->buf) : in->end;
					in->beg = nl ? (size_t)(nl - in->buf) + 1 : in->end;
					*line = NULL;
					*len = seen;
					return 2;
				}
				seen += in->end;
			}
		}
		/* need more bytes: compact, grow if one line fills the buffer */
		if (in->beg > 0) {
			memmove(in->buf, in->buf + in->beg, in->end - in->beg);
			in->end -= in->beg;
			in->beg = 0;
		}
		scan = in->end;
		if (in->cap - in->end < MT_INPUT_BLOCK / 2) {
			size_t ncap = in->cap ? in->cap * 2 : MT_INPUT_BLOCK;
			if (in->max_line && ncap > in->max_line + 2 * MT_INPUT_BLOCK)
				ncap = in->max_line + 2 * MT_INPUT_BLOCK;
			if (ncap <= in->cap) /* at the cap: the next pass sees the line is over it */
				ncap = in->cap + MT_INPUT_BLOCK;
			char *nb = realloc(in->buf, ncap);
			if (!nb)
				return mt_err_set(err, MT_EXIT_IO, "out of memory: a line longer than %zu bytes in '%s'",
						  in->cap, in->name);
			in->buf = nb;
			in->cap = ncap;
		}
		r = mt_input_read(in, in->buf + in->end, in->cap - in->end, err);
		if (r < 0)
			return -1;
		in->end += (size_t)r;
	}
}

const char *mt_input_name(const struct mt_input *in) { return in->name; }
const char *mt_input_member(const struct mt_input *in) { return in->member ? in->member : in->name; }
int mt_input_is_archive(const struct mt_input *in) { return in->is_archive; }
int64_t mt_input_size(const struct mt_input *in) { return in->size; }

int64_t mt_input_consumed(const struct mt_input *in)
{
	return (int64_t)archive_filter_bytes(in->a, -1);
}

static int has_glob_chars(const char *s)
{
	return strpbrk(s, "*?[") != NULL;
}

int mt_input_expand(const char *const *patterns, int n, char ***paths, int *npaths,
		    struct mt_err *err)
{
	char **out = NULL;
	int count = 0, cap = 0;

	*paths = NULL;
	*npaths = 0;
	for (int i = 0; i < n; i++) {
		glob_t g;
		size_t k;
		int r;

		if (!has_glob_chars(patterns[i]) || strcmp(patterns[i], "-") == 0) {
			g.gl_pathc = 1;
			g.gl_pathv = (char **)&patterns[i];
			r = -1; /* nothing to globfree */
		} else {
			r = glob(patterns[i], GLOB_ERR, NULL, &g);
			if (r == GLOB_NOMATCH) {
				mt_input_paths_free(out);
				return mt_err_set(err, MT_EXIT_IO, "no file matches '%s'", patterns[i]);
			}
			if (r != 0) {
				mt_input_paths_free(out);
				return mt_err_set(err, MT_EXIT_IO, "cannot expand '%s'", patterns[i]);
			}
		}
		for (k = 0; k < g.gl_pathc; k++) {
			if (count + 2 > cap) {
				char **no;
				cap = cap ? 2 * cap : 16;
				no = realloc(out, (size_t)cap * sizeof(*out));
				if (!no) {
					if (r == 0)
						globfree(&g);
					mt_input_paths_free(out);
					return mt_err_set(err, MT_EXIT_IO, "out of memory");
				}
				out = no;
			}
			out[count] = strdup(g.gl_pathv[k]);
			out[++count] = NULL;
		}
		if (r == 0)
			globfree(&g);
	}
	*paths = out;
	*npaths = count;
	return 0;
}

void mt_input_paths_free(char **paths)
{
	for (int i = 0; paths && paths[i]; i++)
		free(paths[i]);
	free(paths);
}
