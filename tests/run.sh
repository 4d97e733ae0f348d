#!/usr/bin/env bash
# Run the layering check, the C unit tests, then the Bats suites; print everything they print and
# end with one line "N passed, N failed[, N skipped]". Exit 1 on any failure.
#   BUILD=build tests/run.sh [bats files...]
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
passed=0 failed=0 skipped=0

count() { # read TAP on stdin, echo it, tally
	local line
	while IFS= read -r line; do
		printf '%s\n' "$line"
		case $line in
		"not ok "*) failed=$((failed + 1)) ;;
		"ok "*"# skip"* | "ok "*"# SKIP"*) skipped=$((skipped + 1)) ;;
		"ok "*) passed=$((passed + 1)) ;;
		esac
	done
}

# the layering of lib/ (docs/architecture.md): one test of its own
echo "# layers: scripts/check-layers.sh"
if out=$(scripts/check-layers.sh 2>&1); then
	count <<<"ok - no include points up a layer, every lib/ file is named in docs/architecture.md, no file or function over its size"
else
	printf '%s\n' "$out" | sed 's/^/# /'
	count <<<"not ok - the layering, naming or size check failed (scripts/check-layers.sh)"
fi

for t in "$BUILD"/tests/test_*; do
	[ -x "$t" ] || continue
	echo "# unit: ${t##*/}"
	out=$("$t" 2>&1)
	rc=$?
	count <<<"$out"
	if [ $rc -ne 0 ] && ! grep -q '^not ok' <<<"$out"; then
		echo "not ok - ${t##*/} exited with status $rc"
		failed=$((failed + 1))
	fi
done

suites=("$@")
# tests/slurm/ starts a real one-node Slurm (root and the Slurm packages; skipped otherwise)
[ ${#suites[@]} -gt 0 ] || suites=(tests/*.bats tests/slurm/*.bats)
if command -v bats >/dev/null; then
	echo "# bats: ${suites[*]}"
	out=$(BUILD=$BUILD bats --tap "${suites[@]}" 2>&1)
	rc=$?
	count <<<"$out"
	if [ $rc -ne 0 ] && ! grep -q '^not ok' <<<"$out"; then
		echo "not ok - bats exited with status $rc"
		failed=$((failed + 1))
	fi
else
	echo "not ok - bats is not installed (run scripts/install-deps.sh)"
	failed=$((failed + 1))
fi

summary="$passed passed, $failed failed"
[ $skipped -gt 0 ] && summary="$summary, $skipped skipped"
echo "$summary"
[ $failed -eq 0 ]
