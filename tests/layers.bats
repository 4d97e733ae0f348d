#!/usr/bin/env bats
# The layering of the source tree (docs/architecture.md "Layers"): scripts/check-layers.sh
# passes on the tree as it is and names the file and the include when one points up, a
# lib/ file docs/architecture.md does not name in its layer's section, a lib/ file over
# 1500 lines and a lib/train/ or bin/ function over 200; a build leaves nothing in the
# source folders.
load helpers

# a copy of the folders the check reads, to plant mistakes in
copy_tree() {
	T=$BATS_TEST_TMPDIR/tree
	mkdir -p "$T"
	cp -R "$MT_ROOT/lib" "$MT_ROOT/bin" "$MT_ROOT/kernels" "$MT_ROOT/scripts" "$MT_ROOT/docs" "$T/"
}

# a small tree that passes every rule, to plant one mistake in: its own
# docs/architecture.md, so that these tests do not depend on the real tree's sizes
mini_tree() {
	T=$BATS_TEST_TMPDIR/mini
	rm -rf "$T"
	mkdir -p "$T/lib/base" "$T/lib/text" "$T/lib/train" "$T/bin" "$T/kernels" "$T/scripts" "$T/docs"
	cp "$MT_ROOT/scripts/check-layers.sh" "$T/scripts/"
	printf 'int mt_err_x(void)\n{\n\treturn 0;\n}\n' > "$T/lib/base/err.c"
	printf 'int mt_err_x(void);\n' > "$T/lib/base/err.h"
	printf 'syntax = "proto2";\n' > "$T/lib/base/tfevent.proto"
	printf '/* generated */\n' > "$T/lib/base/tfevent.pb-c.c"
	printf '/* generated */\n' > "$T/lib/base/tfevent.pb-c.h"
	printf '/* generated */\n' > "$T/lib/text/unicode_classes.h"
	printf '#include "base/err.h"\nint mt_train_x(void)\n{\n\treturn mt_err_x();\n}\n' > "$T/lib/train/train.c"
	printf 'int mt_train_x(void);\n' > "$T/lib/train/train.h"
	printf 'int main(void)\n{\n\treturn 0;\n}\n' > "$T/bin/mt-x.c"
	cat > "$T/docs/architecture.md" <<-'EOF'
		# Architecture
		### `lib/base/`
		| file | concept |
		|---|---|
		| `err.[ch]` | errors |
		| `tfevent.proto`, `tfevent.pb-c.[ch]` | events |

		### `lib/text/`
		| `unicode_classes.h` | generated |

		### `lib/train/`
		| `train.[ch]` | the loop |

		## Build
		`lib/*/*.cc` files
	EOF
	run -0 --separate-stderr "$T/scripts/check-layers.sh" "$T"
	[ -z "$stderr" ] || { echo "the small tree does not pass: $stderr"; false; }
}

# N lines of a function body: body N
body() {
	local i
	for ((i = 0; i < $1; i++)); do printf '\tx += %d;\n' "$i"; done
}

@test "make check-layers passes on the tree as committed" {
	run -0 make -s -C "$MT_ROOT" check-layers
	[ -z "$output" ]
}

@test "lib/ holds only layer folders, each with its paragraph in docs/architecture.md" {
	for f in "$MT_ROOT"/lib/*; do
		n=${f##*/}
		[ "$n" = README.md ] && continue
		[ -d "$f" ] || { echo "a file in lib/: $n"; false; }
		grep -q "^### \`lib/$n/\`" "$MT_ROOT/docs/architecture.md" || { echo "no paragraph for lib/$n/"; false; }
	done
}

@test "an include pointing up a layer fails, naming the file, the line and both layers" {
	copy_tree
	printf '#include "train/train.h"\n' >> "$T/lib/base/err.c"
	line=$(wc -l < "$T/lib/base/err.c")
	run -1 --separate-stderr "$T/scripts/check-layers.sh" "$T"
	[[ $stderr == *"lib/base/err.c:$line: includes \"train/train.h\" (layer train), above its own layer base"* ]] || { echo "$stderr"; false; }
}

@test "a relative include that climbs into a higher layer fails too; one into a lower layer passes" {
	copy_tree
	printf '#include "../eval/ledger.h"\n' >> "$T/lib/model/params.c"
	run -1 --separate-stderr "$T/scripts/check-layers.sh" "$T"
	[[ $stderr == *"lib/model/params.c:"*"(layer eval), above its own layer model"* ]] || { echo "$stderr"; false; }
	mini_tree
	printf '#include "../base/err.h"\n' >> "$T/lib/train/train.c"
	run -0 "$T/scripts/check-layers.sh" "$T"
}

@test "kernels may not include the library, and a tool may include any layer" {
	copy_tree
	printf '#include "../lib/base/err.h"\n' >> "$T/kernels/norm.h"
	run -1 --separate-stderr "$T/scripts/check-layers.sh" "$T"
	[[ $stderr == *"kernels/norm.h:"*"(layer base), above its own layer kernels"* ]] || { echo "$stderr"; false; }
	mini_tree
	printf '#include "train/train.h"\n' >> "$T/bin/mt-x.c"
	run -0 "$T/scripts/check-layers.sh" "$T"
}

@test "a stray file in lib/, an unlisted folder and an include of no file are refused" {
	copy_tree
	: > "$T/lib/stray.c"
	mkdir "$T/lib/extras"
	printf '#include "data/nosuch.h"\n' >> "$T/lib/data/idx.c"
	run -1 --separate-stderr "$T/scripts/check-layers.sh" "$T"
	[[ $stderr == *"lib/stray.c: a file directly in lib/"* ]]
	[[ $stderr == *"lib/extras/: a folder that is not a layer"* ]]
	[[ $stderr == *"lib/data/idx.c:"*"includes \"data/nosuch.h\", which is no file of the tree"* ]]
}

@test "a lib file docs/architecture.md does not name fails, naming the file and its layer's section" {
	mini_tree
	: > "$T/lib/base/extra.c"
	run -1 --separate-stderr "$T/scripts/check-layers.sh" "$T"
	[ "$stderr" = "lib/base/extra.c: not named in docs/architecture.md (the lib/base/ section)" ] || { echo "$stderr"; false; }
	# a name in another layer's section, or outside every section, does not count
	sed -i 's/^| `train.\[ch\]` |/| `train.[ch]`, `extra.c` |/; s/^`lib\/\*\/\*.cc` files/`extra.c` too/' "$T/docs/architecture.md"
	grep -q '^| `train.\[ch\]`, `extra.c` |' "$T/docs/architecture.md" && grep -q '^`extra.c` too' "$T/docs/architecture.md"
	run -1 --separate-stderr "$T/scripts/check-layers.sh" "$T"
	[ "$stderr" = "lib/base/extra.c: not named in docs/architecture.md (the lib/base/ section)" ] || { echo "$stderr"; false; }
}

@test "naming the file in its section, alone or as stem.[ch], makes it pass" {
	mini_tree
	: > "$T/lib/base/extra.c"
	: > "$T/lib/base/extra.h"
	sed -i 's/^| `err.\[ch\]` |/| `err.[ch]`, `extra.c` |/' "$T/docs/architecture.md"
	run -1 --separate-stderr "$T/scripts/check-layers.sh" "$T"
	[ "$stderr" = "lib/base/extra.h: not named in docs/architecture.md (the lib/base/ section)" ] || { echo "$stderr"; false; }
	sed -i 's/`extra.c`/`extra.[ch]`/' "$T/docs/architecture.md"
	run -0 --separate-stderr "$T/scripts/check-layers.sh" "$T"
	[ -z "$stderr" ]
}

@test "a file in a layer's subfolder is named by its path from the layer, or in the subfolder's own section" {
	mini_tree
	mkdir "$T/lib/train/sub"
	: > "$T/lib/train/sub/part.c"
	: > "$T/lib/train/sub/other.c"
	sed -i 's/^| `train.\[ch\]` |/| `train.[ch]`, `part.c`, `sub\/part.c` |/' "$T/docs/architecture.md"
	grep -q '`sub/part.c` |' "$T/docs/architecture.md"
	run -1 --separate-stderr "$T/scripts/check-layers.sh" "$T"
	[ "$stderr" = "lib/train/sub/other.c: not named in docs/architecture.md (the lib/train/ section)" ] || { echo "$stderr"; false; }
	printf '\n#### `lib/train/sub/`\n| `part.c` |\n' >> "$T/docs/architecture.md"
	run -1 --separate-stderr "$T/scripts/check-layers.sh" "$T"
	[ "$stderr" = "lib/train/sub/other.c: not named in docs/architecture.md (the lib/train/sub/ section)" ] || { echo "$stderr"; false; }
	printf '| `other.c` |\n' >> "$T/docs/architecture.md"
	run -0 "$T/scripts/check-layers.sh" "$T"
}

@test "two modules of lib/ that include each other fail, naming the ring; an internal header without a .c does not" {
	mini_tree
	printf '#include "text/b.h"\nint mt_a(void);\n' > "$T/lib/text/a.h"
	printf '#include "text/a.h"\nint mt_a(void)\n{\n\treturn 0;\n}\n' > "$T/lib/text/a.c"
	printf 'int mt_b(void);\n' > "$T/lib/text/b.h"
	printf '#include "text/b.h"\nint mt_b(void)\n{\n\treturn 0;\n}\n' > "$T/lib/text/b.c"
	sed -i 's/^| `unicode_classes.h` | generated |$/&\n| `a.[ch]`, `b.[ch]`, `inner.h` | two modules |/' "$T/docs/architecture.md"
	run "$T/scripts/check-layers.sh" "$T"
	[ "$status" -eq 0 ]
	# b.c now includes a.h back: a ring of two
	printf '#include "text/a.h"\n#include "text/b.h"\nint mt_b(void)\n{\n\treturn 0;\n}\n' > "$T/lib/text/b.c"
	run --separate-stderr "$T/scripts/check-layers.sh" "$T"
	[ "$status" -eq 1 ]
	[[ $stderr == *"include circle between modules of lib/: "*"lib/text/a"*"lib/text/b"* ]] || [[ $stderr == *"include circle between modules of lib/: "*"lib/text/b"*"lib/text/a"* ]]
	# through an internal header (no inner.c) the ring is the same ring
	printf '#include "text/a.h"\n' > "$T/lib/text/inner.h"
	printf '#include "text/inner.h"\n#include "text/b.h"\nint mt_b(void)\n{\n\treturn 0;\n}\n' > "$T/lib/text/b.c"
	run --separate-stderr "$T/scripts/check-layers.sh" "$T"
	[ "$status" -eq 1 ]
	[[ $stderr == *"include circle"* ]]
	# an internal header that includes its own module's header is no ring
	printf '#include "text/b.h"\n' > "$T/lib/text/inner.h"
	run "$T/scripts/check-layers.sh" "$T"
	[ "$status" -eq 0 ]
}

@test "a lib file over 1500 lines fails, naming it and its length; generated files are exempt" {
	mini_tree
	for f in lib/base/tfevent.pb-c.c lib/base/tfevent.pb-c.h lib/text/unicode_classes.h; do
		seq 1 2000 > "$T/$f"
	done
	run -0 --separate-stderr "$T/scripts/check-layers.sh" "$T"
	[ -z "$stderr" ]
	seq 1 1500 > "$T/lib/base/err.h"
	run -0 "$T/scripts/check-layers.sh" "$T"
	seq 1 1501 > "$T/lib/base/err.h"
	run -1 --separate-stderr "$T/scripts/check-layers.sh" "$T"
	[ "$stderr" = "lib/base/err.h: 1501 lines, over 1500" ] || { echo "$stderr"; false; }
}

@test "a bin or lib/train function over 200 lines fails, naming the file, line, function and length" {
	mini_tree
	# main() from its name to its brace: 200 lines pass (a brace in a string or a
	# comment does not count), 201 fail
	{ printf '/* { */\nstatic int x;\n\nint\nmain(int argc,\n     char **argv)\n{\n\tconst char *s = "{";\n'; body 194; printf '\treturn x;\n}\n'; } > "$T/bin/mt-x.c"
	run -0 --separate-stderr "$T/scripts/check-layers.sh" "$T"
	[ -z "$stderr" ] || { echo "$stderr"; false; }
	{ printf '/* { */\nstatic int x;\n\nint\nmain(int argc,\n     char **argv)\n{\n\tconst char *s = "{";\n'; body 195; printf '\treturn x;\n}\n'; } > "$T/bin/mt-x.c"
	run -1 --separate-stderr "$T/scripts/check-layers.sh" "$T"
	[ "$stderr" = "bin/mt-x.c:5: main() is 201 lines, over 200" ] || { echo "$stderr"; false; }
	# a long table is no function; a long function in lib/train/ is one
	{ printf 'static const int t[] = {\n'; for ((i = 0; i < 300; i++)); do echo "$i,"; done; printf '};\n'; } > "$T/bin/mt-x.c"
	{ printf 'static int x;\nstatic void step(void)\n{\n'; body 250; printf '}\n'; } > "$T/lib/train/train.c"
	run -1 --separate-stderr "$T/scripts/check-layers.sh" "$T"
	[ "$stderr" = "lib/train/train.c:2: step() is 253 lines, over 200" ] || { echo "$stderr"; false; }
	# other layers' functions are not measured
	mv "$T/lib/train/train.c" "$T/lib/base/err.c"
	printf 'int mt_train_x(void)\n{\n\treturn 0;\n}\n' > "$T/lib/train/train.c"
	run -0 "$T/scripts/check-layers.sh" "$T"
}

@test "a build writes nothing into the source folders" {
	command -v git >/dev/null && git -C "$MT_ROOT" rev-parse --git-dir >/dev/null 2>&1 || skip "not a git checkout"
	B=$BATS_TEST_TMPDIR/build
	run -0 make -s -C "$MT_ROOT" CUDA=0 BUILD="$B" "$B/bin/mt-index"
	[ -x "$B/bin/mt-index" ]
	# new files only (untracked or ignored): edits to tracked files are not the build's
	run -0 git -C "$MT_ROOT" status --porcelain --ignored=matching bin lib kernels
	run -1 grep -E '^(\?\?|!!) ' <<<"$output"
}

@test "kernels/wgmma.cuh is what scripts/gen-wgmma.py writes" {
	run -0 /usr/bin/python3 "$MT_ROOT/scripts/gen-wgmma.py"
	diff <(printf '%s\n' "$output") "$MT_ROOT/kernels/wgmma.cuh"
}
