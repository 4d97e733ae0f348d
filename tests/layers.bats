#!/usr/bin/env bats
# The layering of the source tree (docs/architecture.md "Layers"): scripts/check-layers.sh
# passes on the tree as it is and names the file and the include when one points up; a
# build leaves nothing in the source folders.
load helpers

# a copy of the folders the check reads, to plant mistakes in
copy_tree() {
	T=$BATS_TEST_TMPDIR/tree
	mkdir -p "$T"
	cp -R "$MT_ROOT/lib" "$MT_ROOT/bin" "$MT_ROOT/kernels" "$MT_ROOT/scripts" "$T/"
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
	copy_tree
	printf '#include "../base/err.h"\n' >> "$T/lib/model/params.c"
	run -0 "$T/scripts/check-layers.sh" "$T"
}

@test "kernels may not include the library, and a tool may include any layer" {
	copy_tree
	printf '#include "../lib/base/err.h"\n' >> "$T/kernels/norm.h"
	run -1 --separate-stderr "$T/scripts/check-layers.sh" "$T"
	[[ $stderr == *"kernels/norm.h:"*"(layer base), above its own layer kernels"* ]] || { echo "$stderr"; false; }
	copy_tree
	printf '#include "eval/ledger.h"\n' >> "$T/bin/mt-index.c"
	run -0 "$T/scripts/check-layers.sh" "$T"
}

@test "a stray file in lib/, an unlisted folder and an include of no file are refused" {
	copy_tree
	: > "$T/lib/stray.c"
	mkdir "$T/lib/parallel"
	printf '#include "data/nosuch.h"\n' >> "$T/lib/data/idx.c"
	run -1 --separate-stderr "$T/scripts/check-layers.sh" "$T"
	[[ $stderr == *"lib/stray.c: a file directly in lib/"* ]]
	[[ $stderr == *"lib/parallel/: a folder that is not a layer"* ]]
	[[ $stderr == *"lib/data/idx.c:"*"includes \"data/nosuch.h\", which is no file of the tree"* ]]
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
