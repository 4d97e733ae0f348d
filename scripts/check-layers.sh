#!/usr/bin/env bash
# check-layers: every #include "..." in lib/, bin/ and kernels/ points at the same
# layer or one below it (docs/architecture.md "Layers"). Prints each violation as
#   FILE:LINE: includes "PATH" (layer X), above its own layer Y
# and exits 1 if there is any; exits 0 silently otherwise. Also refused: a file
# directly in lib/ (every file belongs to a layer folder), a folder of lib/ missing
# from the order below, and an include that names no file of the tree.
#   scripts/check-layers.sh [ROOT]        (make check-layers)
set -u

# The layers, lowest first: a file may include its own layer and any layer before it.
ORDER="kernels base data text model parallel backend ckpt train infer eval bin"

root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 2
bad=0
say() { printf '%s\n' "$*" >&2; bad=1; }

declare -A RANK
i=0
for l in $ORDER; do RANK[$l]=$i; i=$((i + 1)); done
rank() { echo "${RANK[${1:-none}]:-}"; }

layer_of() { # the layer of a path relative to the root, or nothing outside lib/bin/kernels
	case $1 in
	lib/*/*) L=${1#lib/}; L=${L%%/*} ;;
	kernels/*) L=kernels ;;
	bin/*) L=bin ;;
	*) L= ;;
	esac
}

for f in lib/*; do
	[ -d "$f" ] || { [ "${f##*/}" = README.md ] || say "$f: a file directly in lib/: move it into its layer's folder"; continue; }
	[ -n "$(rank "${f#lib/}")" ] || say "$f/: a folder that is not a layer: add it to ORDER in scripts/check-layers.sh and to docs/architecture.md"
done

while IFS= read -r f; do
	layer_of "$f"
	from=$L
	rf=${RANK[${from:-none}]:-}
	[ -n "$rf" ] || continue
	dir=${f%/*}
	while IFS=: read -r line inc; do
		target=
		for cand in "$dir/$inc" "lib/$inc" "$inc"; do
			if [ -f "$cand" ]; then
				target=$cand
				case $target in */../*) target=$(realpath -m --relative-to=. "$cand") ;; esac
				break
			fi
		done
		if [ -z "$target" ]; then
			say "$f:$line: includes \"$inc\", which is no file of the tree"
			continue
		fi
		layer_of "$target"
		to=$L
		rt=${RANK[${to:-none}]:-}
		[ -n "$rt" ] || { say "$f:$line: includes \"$inc\" ($target), outside lib/, kernels/ and bin/"; continue; }
		[ "$rt" -le "$rf" ] ||
			say "$f:$line: includes \"$inc\" (layer $to), above its own layer $from"
	done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" | paste -d: <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" | cut -d: -f1) -)
done < <(find lib bin kernels -type f \( -name '*.c' -o -name '*.cc' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort)

exit $bad
