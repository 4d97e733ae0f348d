#!/usr/bin/env bash
# Build tests/fuzz/fuzz_idx.c with clang's libFuzzer, ASan and UBSan (against the
# lib sources it needs, compiled with the same flags, not the gcc-built libmt.a)
# into $BUILD/fuzz/, replay every input kept in tests/fuzz/regressions/, then fuzz
# for FUZZ_SECONDS (default 20) from a seed corpus of small valid datasets
# (tests/fuzz/make-seeds.py) and the corpus kept from earlier runs.
#   tests/fuzz/run.sh            (make fuzz runs this)
#   FUZZ_SECONDS=600 tests/fuzz/run.sh
# Exit 0: no crash; 1: a crash, sanitizer report or failed oracle (the input is
# saved as $BUILD/fuzz/artifacts/crash-*; fix the bug, then copy the input into
# tests/fuzz/regressions/ so it is replayed from then on); 77: clang or its fuzzer
# runtime is missing (the Bats test skips).
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
OUT=$BUILD/fuzz
SECONDS_TO_FUZZ=${FUZZ_SECONDS:-20}
CLANG=${CLANG:-}
if [ -z "$CLANG" ]; then
	for c in clang clang-14 clang-15 clang-16 clang-17 clang-18; do
		command -v "$c" >/dev/null 2>&1 && { CLANG=$c; break; }
	done
fi
[ -n "$CLANG" ] || { echo "skip: clang is not installed"; exit 77; }
mkdir -p "$OUT/corpus" "$OUT/seeds" "$OUT/artifacts"
FLAGS=(-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -D_GNU_SOURCE -std=gnu11 -Ilib)

# the runtime: a target that does nothing must link
printf 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }\n' > "$OUT/probe.c"
if ! "$CLANG" "${FLAGS[@]}" -o "$OUT/probe" "$OUT/probe.c" >"$OUT/probe.log" 2>&1; then
	echo "skip: $CLANG cannot build a libFuzzer target (libclang-rt-dev missing?): $(head -n 3 "$OUT/probe.log")"
	exit 77
fi

SRC=(tests/fuzz/fuzz_idx.c lib/data/idx.c lib/data/idxcheck.c lib/data/idxstat.c lib/base/array.c lib/base/atomic.c lib/base/err.c lib/base/files.c lib/base/knobs.c)
echo "# building $OUT/fuzz_idx with $CLANG"
"$CLANG" "${FLAGS[@]}" -o "$OUT/fuzz_idx" "${SRC[@]}" -lpthread || exit 1
python3 tests/fuzz/make-seeds.py "$OUT/seeds" || exit 1

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
regressions=(tests/fuzz/regressions/*)
if [ -e "${regressions[0]}" ]; then
	echo "# replaying ${#regressions[@]} regression inputs"
	"$OUT/fuzz_idx" -error_exitcode=1 -timeout_exitcode=1 "${regressions[@]}" >"$OUT/regressions.log" 2>&1 || {
		tail -n 40 "$OUT/regressions.log"
		echo "not ok: a regression input fails again (log: $OUT/regressions.log)"
		exit 1
	}
fi

echo "# fuzzing for $SECONDS_TO_FUZZ s"
"$OUT/fuzz_idx" -max_total_time="$SECONDS_TO_FUZZ" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
	-error_exitcode=1 -timeout_exitcode=1 -print_final_stats=1 -artifact_prefix="$OUT/artifacts/" \
	"$OUT/corpus" "$OUT/seeds" tests/fuzz/regressions >"$OUT/fuzz.log" 2>&1
rc=$?
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$OUT/fuzz.log" | tail -n 1)
cov=$(grep -o 'cov: [0-9]*' "$OUT/fuzz.log" | tail -n 1)
if [ $rc -ne 0 ]; then
	tail -n 60 "$OUT/fuzz.log"
	echo "not ok: fuzz_idx found a problem after ${execs:-?} executions; input in $OUT/artifacts/"
	exit 1
fi
echo "ok: fuzz_idx ran ${execs:-?} executions in $SECONDS_TO_FUZZ s ($cov), no crash (corpus: $(ls "$OUT/corpus" | wc -l) inputs)"
