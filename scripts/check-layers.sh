#!/usr/bin/env bash
# check-layers: every #include "..." in lib/, bin/ and kernels/ points at the same
# layer or one below it (docs/architecture.md "Layers"). Prints each violation as
#   FILE:LINE: includes "PATH" (layer X), above its own layer Y
# and exits 1 if there is any; exits 0 silently otherwise. Also refused: a file
# directly in lib/ (every file belongs to a layer folder), a folder of lib/ missing
# from the order below, and an include that names no file of the tree.
# The docs and the sizes, checked here too so that neither drifts:
# - every file under lib/ is named in its layer's section of docs/architecture.md
#   (the section under the heading "### `lib/<layer>/`", or one headed with its
#   subfolder's path): as `name.c`, as `stem.[ch]` (or `stem.[cu,h]`) for both, or
#   by its path from that heading (`cuda/name.c`); else
#     lib/x/y.c: not named in docs/architecture.md (the lib/x/ section)
# - no file under lib/ holds over 1500 lines (the generated lib/base/tfevent.pb-c.[ch]
#   and lib/text/unicode_*.h aside): FILE: N lines, over 1500
# - no function of lib/train/ or bin/ holds over 200 lines, counted from the line of
#   its name to its closing brace (top-level definitions, found by brace depth with
#   comments, strings and preprocessor lines left out):
#     FILE:LINE: NAME() is N lines, over 200
# - no two modules of lib/ (a module: x.c with x.h) include each other, directly or
#   around a ring; a header with no .c of its own counts as part of its includers:
#     include circle between modules of lib/: MODULE MODULE ...
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

# --- every file of lib/ named in docs/architecture.md, in its own layer's section
doc=docs/architecture.md
if [ ! -f "$doc" ]; then
	say "$doc: missing: it names every file of lib/"
else
	while IFS= read -r msg; do say "$msg"; done < <(
		find lib -mindepth 2 -type f ! -name '*.md' ! -name '.*' | LC_ALL=C sort |
			awk -v doc="$doc" '
			# the backquoted names of a section, `stem.[ch]` and `stem.[cu,h]` expanded
			function add(sec, tok,   p, stem, inner, n, i, part) {
				if (match(tok, /\.\[[a-z0-9,]+\]$/)) {
					stem = substr(tok, 1, RSTART)
					inner = substr(tok, RSTART + 2, RLENGTH - 3)
					if (index(inner, ",")) n = split(inner, part, ",")
					else { n = length(inner); for (i = 1; i <= n; i++) part[i] = substr(inner, i, 1) }
					for (i = 1; i <= n; i++) named[sec, stem part[i]] = 1
				} else named[sec, tok] = 1
			}
			BEGIN {
				# a section runs from a heading naming a folder of lib/ to the next such
				# heading or the next heading of its level or above
				cur = ""
				while ((getline line < doc) > 0) {
					if (line ~ /^#+ /) {
						lvl = index(line, " ") - 1
						path = ""
						if (match(line, /`lib\/[^`]*\/`/)) path = substr(line, RSTART + 1, RLENGTH - 2)
						if (cur != "" && (path != "" || lvl <= curlvl)) cur = ""
						if (path != "") { cur = path; curlvl = lvl; has[path] = 1 }
						continue
					}
					if (cur == "") continue
					while (match(line, /`[^`]+`/)) {
						tok = substr(line, RSTART + 1, RLENGTH - 2)
						line = substr(line, RSTART + RLENGTH)
						add(cur, tok)
					}
				}
			}
			{
				f = $0
				split(f, part, "/")
				layer = "lib/" part[2] "/"
				ok = 0
				sec = layer
				# each folder from the file'"'"'s own up to its layer'"'"'s: its section may name the
				# file by its path from there
				d = f
				sub(/[^\/]*$/, "", d)
				first = 1
				while (length(d) >= length(layer)) {
					if (has[d] && first) { sec = d; first = 0 }
					if (named[d, substr(f, length(d) + 1)] || named[d, f]) { ok = 1; break }
					sub(/[^\/]*\/$/, "", d)
				}
				if (!ok) print f ": not named in " doc " (the " sec " section)"
			}')
fi

# --- circles: no two modules of lib/ include each other, directly or around a ring. A module
# is a stem (x.c and x.h); a header with no .c of its own (an internal header such as
# train/trainer.h) is part of whoever includes it, so its includes count as theirs. tsort
# names the modules of a ring.
declare -A SRC
while IFS= read -r f; do SRC[${f%.*}]=1; done < <(find lib -type f \( -name '*.c' -o -name '*.cc' \))
declare -A INCS
incs_of() { # the lib files f includes, resolved as the compiler would (-Ilib)
	local f=$1 inc cand
	sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" | while IFS= read -r inc; do
		for cand in "${f%/*}/$inc" "lib/$inc"; do
			[ -f "$cand" ] && { realpath -m --relative-to=. "$cand"; break; }
		done
	done | grep '^lib/'
}
deps_of() { # the modules f depends on, through header-only files
	local f=$1 g seen=" $1 " todo
	todo=$(incs_of "$f")
	while :; do
		set -- $todo
		[ $# -gt 0 ] || break
		g=$1
		shift
		todo="$*"
		case $seen in *" $g "*) continue ;; esac
		seen="$seen $g "
		if [ -n "${SRC[${g%.*}]:-}" ]; then
			echo "${g%.*}"
		else
			todo="$todo $(incs_of "$g")"
		fi
	done
}
edges=$(find lib -type f \( -name '*.c' -o -name '*.cc' -o -name '*.h' \) | LC_ALL=C sort | while IFS= read -r f; do
	m=${f%.*}
	[ -n "${SRC[$m]:-}" ] || continue
	deps_of "$f" | while IFS= read -r d; do [ "$d" = "$m" ] || echo "$m $d"; done
done | LC_ALL=C sort -u)
if ! loop=$(printf '%s\n' "$edges" | tsort 2>&1 >/dev/null); then
	say "include circle between modules of lib/: $(printf '%s\n' "$loop" | sed -n 's/^tsort: \(lib\/.*\)/\1/p' | tr '\n' ' ')(a module's .c or .h includes the next one's header; break it with an operations table or by moving the shared part down)"
fi

# --- sizes: a file of lib/ over 1500 lines (generated files aside)
while IFS= read -r f; do
	case $f in lib/base/tfevent.pb-c.[ch] | lib/text/unicode_*.h) continue ;; esac
	n=$(wc -l < "$f")
	[ "$n" -le 1500 ] || say "$f: $n lines, over 1500"
done < <(find lib -type f ! -name '*.md' | LC_ALL=C sort)

# --- sizes: a function of lib/train/ or bin/ over 200 lines
while IFS= read -r msg; do say "$msg"; done < <(
	find lib/train bin -type f \( -name '*.c' -o -name '*.cc' -o -name '*.h' \) | LC_ALL=C sort |
		xargs -r awk '
		FNR == 1 { depth = 0; incomment = 0; pp = 0; sig = ""; fline = 0; infunc = 0 }
		{
			line = $0
			# preprocessor lines and their continuations hold no code of a function body
			if (!incomment && (pp || line ~ /^[ \t]*#/)) { pp = (line ~ /\\$/); next }
			# the line without comments, and strings and characters emptied
			out = ""; i = 1; n = length(line)
			while (i <= n) {
				c = substr(line, i, 1)
				if (incomment) {
					if (c == "*" && substr(line, i + 1, 1) == "/") { incomment = 0; i += 2; out = out " " }
					else i++
					continue
				}
				if (c == "/" && substr(line, i + 1, 1) == "*") { incomment = 1; i += 2; continue }
				if (c == "/" && substr(line, i + 1, 1) == "/") break
				if (c == "\"" || c == "\047") {
					q = c; i++
					while (i <= n) {
						d = substr(line, i, 1)
						if (d == "\\") i += 2
						else if (d == q) { i++; break }
						else i++
					}
					out = out q q
					continue
				}
				out = out c; i++
			}
			n = length(out)
			for (i = 1; i <= n; i++) {
				c = substr(out, i, 1)
				if (depth == 0) {
					if (c == "{") {
						s = sig
						sub(/[ \t]+$/, "", s)
						p = index(s, "(")
						infunc = 0
						if (p > 0 && s ~ /\)$/ && index(s, "=") == 0) {
							name = substr(s, 1, p - 1)
							sub(/[ \t]+$/, "", name)
							if (match(name, /[A-Za-z_][A-Za-z_0-9]*$/)) {
								name = substr(name, RSTART)
								infunc = 1
								start = fline
							}
						}
						depth = 1
					} else if (c == ";" || c == "}") {
						sig = ""; fline = 0
					} else {
						if (c == "(" && fline == 0) fline = FNR
						sig = sig c
					}
				} else if (c == "{") depth++
				else if (c == "}") {
					depth--
					if (depth == 0) {
						if (infunc && FNR - start + 1 > 200)
							print FILENAME ":" start ": " name "() is " FNR - start + 1 " lines, over 200"
						infunc = 0; sig = ""; fline = 0
					}
				}
			}
			if (depth == 0) sig = sig " "
		}')

exit $bad
