#!/usr/bin/env bats
# TensorBoard event files of mt-train --tensorboard-dir and mt-eval --watch --tensorboard-dir,
# read back by tests/reference/tfevents_read.py (written from the formats: TFRecord framing
# with both CRC32Cs checked by crcmod, the Event/Summary messages decoded by google.protobuf)
# and compared with mt-train's --log-json and mt-eval's ledger; Megatron's 175B launch
# arguments through --dry-run, and the Megatron flags mt-train accepts or refuses.
load helpers
cpu_only

# Debian's python3, which has python3-protobuf and python3-crcmod (scripts/install-deps.sh --test)
PY=${MT_PYTHON:-/usr/bin/python3}
READ=("$PY" "$MT_ROOT/tests/reference/tfevents_read.py")

setup_file() {
	cd "$BATS_FILE_TMPDIR"
	export OMP_NUM_THREADS=1
	python3 "$MT_ROOT/share/demo/make-corpus.py" --docs 300 > c.jsonl
	mt-tokenize train -q --input c.jsonl --vocab-size 300 --output-prefix tok
	mt-tokenize -q --input c.jsonl --json-keys text --tokenizer-type GPT2BPETokenizer --vocab-file tok-vocab.json \
		--merge-file tok-merges.txt --append-eod --output-prefix c
}

train() {
	mt-train -q --config "$MT_ROOT/share/configs/tiny.conf" --data-path "$BATS_FILE_TMPDIR/c_text_document" \
		--tokenizer-type GPT2BPETokenizer --vocab-file "$BATS_FILE_TMPDIR/tok-vocab.json" \
		--merge-file "$BATS_FILE_TMPDIR/tok-merges.txt" --split 90,8,2 --data-cache-path "$BATS_FILE_TMPDIR/cache" \
		--micro-batch-size 2 --global-batch-size 4 --train-iters 12 --lr 3e-3 --eval-interval 5 --eval-iters 2 "$@"
}

# Every scalar of the reader's output (JSON lines in $1) against mt-train's JSON log ($2):
# the tags present, their steps, and the values (float32 in the file: relative 1e-6).
check_against_log() {
	"$PY" - "$1" "$2" "$3" <<'EOF'
import json, math, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
log = [json.loads(l) for l in open(sys.argv[2])]
interval = int(sys.argv[3])
got = {}
for e in ev:
    got.setdefault(e["tag"], {})[e["step"]] = e["value"]
def close(a, b):
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)
every = [r for r in log if r["iteration"] % interval == 0]
assert every, "no log lines at the interval"
pairs = [("lm loss", "loss"), ("learning-rate", "lr"), ("grad-norm", "grad_norm")]
for tag, key in pairs:
    steps = {r["iteration"] for r in every}
    assert set(got[tag]) == steps, (tag, sorted(got[tag]), sorted(steps))
    assert set(got[tag + " vs samples"]) == {r["consumed_samples"] for r in every}, tag
    for r in every:
        assert close(got[tag][r["iteration"]], r[key]), (tag, r["iteration"], got[tag][r["iteration"]], r[key])
        assert close(got[tag + " vs samples"][r["consumed_samples"]], r[key]), tag
for r in every:
    assert got["batch-size"][r["iteration"]] == 4 and got["loss-scale"][r["iteration"]] == 1.0
    assert got["tokens-per-second"][r["iteration"]] > 0
valid = [r for r in log if "valid_loss" in r]
assert [r["iteration"] for r in valid] == [5, 10], valid
for r in valid:
    assert close(got["lm loss validation"][r["iteration"]], r["valid_loss"])
    assert close(got["lm loss validation vs samples"][r["consumed_samples"]], r["valid_loss"])
    assert close(got["lm loss validation ppl"][r["iteration"]], r["valid_ppl"])
print(len(ev), "scalars,", len(got), "tags")
EOF
}

@test "--tensorboard-dir: Megatron's tags, steps and values equal the JSON log's; both CRCs of every record check" {
	cd "$BATS_TEST_TMPDIR"
	run -0 --separate-stderr train --log-interval 1 --log-json log.jsonl --tensorboard-dir tb \
		--log-validation-ppl-to-tensorboard --log-timers-to-tensorboard --log-memory-to-tensorboard
	ls tb/events.out.tfevents.*.*
	[ "$(ls tb | wc -l)" -eq 1 ]
	run -0 --separate-stderr "${READ[@]}" tb
	echo "$output" > ev.jsonl
	check_against_log ev.jsonl log.jsonl 1
	# the optional groups are there, and positive
	"$PY" - <<'EOF'
import json
tags = {}
for l in open("ev.jsonl"):
    e = json.loads(l)
    tags.setdefault(e["tag"], []).append(e["value"])
for t in ("iteration-time", "throughput", "mem-allocated-bytes", "mem-reserved-bytes", "mem-max-allocated-bytes",
          "mem-host-rss-bytes"):
    assert len(tags[t]) == 12 and min(tags[t]) > 0, t
# Megatron's phase timers of a one-rank run, "<timer>-time", seconds an iteration
timers = ("forward-backward", "forward-compute", "backward-compute", "batch-generator", "optimizer",
          "optimizer-clip-main-grad", "optimizer-inner-step")
for t in timers:
    assert len(tags[t + "-time"]) == 12 and min(tags[t + "-time"]) > 0, t
# none a rank of one does not have, and nothing else with the suffix
assert {t for t in tags if t.endswith("-time")} == {t + "-time" for t in timers} | {"iteration-time"}, sorted(tags)
# they nest as Megatron's do, within the iteration
for i in range(12):
    v = {t: tags[t + "-time"][i] for t in timers}
    it = tags["iteration-time"][i]
    assert v["forward-compute"] + v["backward-compute"] + v["batch-generator"] <= v["forward-backward"] * 1.0001, (i, v)
    assert v["optimizer-clip-main-grad"] + v["optimizer-inner-step"] <= v["optimizer"] * 1.0001, (i, v)
    assert v["forward-backward"] + v["optimizer"] <= it * 1.0001, (i, v, it)
EOF
}

@test "--tensorboard-log-interval: training scalars every N iterations, validation at every evaluation; no extras unasked" {
	cd "$BATS_TEST_TMPDIR"
	run -0 --separate-stderr train --log-interval 1 --log-json log.jsonl --tensorboard-dir tb \
		--tensorboard-log-interval 3 --log-validation-ppl-to-tensorboard --tensorboard-queue-size 2
	run -0 --separate-stderr "${READ[@]}" tb
	echo "$output" > ev.jsonl
	check_against_log ev.jsonl log.jsonl 3
	"$PY" - <<'EOF'
import json
ev = [json.loads(l) for l in open("ev.jsonl")]
assert sorted({e["step"] for e in ev if e["tag"] == "lm loss"}) == [3, 6, 9, 12]
assert not [e for e in ev if e["tag"].startswith("mem-") or e["tag"].endswith("-time") or e["tag"] == "throughput"]
EOF
	# without --log-validation-ppl-to-tensorboard no ppl
	rm -rf tb
	run -0 --separate-stderr train --tensorboard-dir tb
	run -0 --separate-stderr "${READ[@]}" tb
	[[ $output == *'"lm loss validation"'* ]]
	[[ $output != *'validation ppl'* ]]
}

@test "the reader is no rubber stamp: a flipped byte fails a CRC, a cut file fails the framing" {
	cd "$BATS_TEST_TMPDIR"
	run -0 --separate-stderr train --train-iters 3 --tensorboard-dir tb
	f=$(ls tb/events.out.tfevents.*)
	run -0 "${READ[@]}" "$f"
	cp "$f" bad
	# a byte inside the second record's data (the first record is ~30 bytes)
	printf '\x7f' | dd of=bad bs=1 seek=60 conv=notrunc status=none
	run -1 --separate-stderr "${READ[@]}" bad
	[[ $stderr == *"CRC"* ]]
	head -c $(($(stat -c %s "$f") - 3)) "$f" > cut
	run -1 --separate-stderr "${READ[@]}" cut
	[[ $stderr == *"truncated"* ]]
}

@test "--tensorboard-dir with two ranks: only rank 0 writes; the data- and pipeline-parallel timers" {
	cd "$BATS_TEST_TMPDIR"
	M=(-q --config "$MT_ROOT/share/configs/tiny.conf" --mock-data --vocab-size 256 --micro-batch-size 1
		--global-batch-size 4 --train-iters 4 --log-timers-to-tensorboard --tensorboard-log-interval 2)
	run -0 --separate-stderr mpiexec -n 2 mt-train "${M[@]}" --tensorboard-dir tb --use-distributed-optimizer
	[ "$(ls tb | wc -l)" -eq 1 ]
	run -0 --separate-stderr "${READ[@]}" tb
	echo "$output" > dp.jsonl
	[ "$(grep -c '"tag": "lm loss"' <<< "$output")" -eq 2 ]
	run -0 --separate-stderr mpiexec -n 2 mt-train "${M[@]}" --tensorboard-dir pp --pipeline-model-parallel-size 2
	run -0 --separate-stderr "${READ[@]}" pp
	echo "$output" > pp.jsonl
	"$PY" - <<'EOF'
import json
def timers(f):
    tags = {}
    for e in map(json.loads, open(f)):
        if e["tag"].endswith("-time"):
            tags.setdefault(e["tag"], []).append((e["step"], e["value"]))
    return tags
dp, pp = timers("dp.jsonl"), timers("pp.jsonl")
# every --tensorboard-log-interval, positive
for tags, want in ((dp, ("all-grads-sync", "params-all-gather", "forward-backward", "optimizer")),
                   (pp, ("forward-recv", "forward-send", "backward-recv", "backward-send",
                         "embedding-grads-all-reduce", "forward-compute", "backward-compute"))):
    for t in want:
        v = tags[t + "-time"]
        assert [s for s, _ in v] == [2, 4] and min(x for _, x in v) > 0, (t, v)
# a data-parallel run has no pipeline transfers, a pipeline of one replica no gradient sync
assert "forward-recv-time" not in dp and "all-grads-sync-time" not in pp and "params-all-gather-time" not in pp
EOF
}

@test "--tensorboard-dir that cannot be made: exit 4 naming it, before any training" {
	cd "$BATS_TEST_TMPDIR"
	touch afile
	run -4 --separate-stderr train --tensorboard-dir afile/tb
	[[ $stderr == *"afile/tb"* ]]
}

@test "mt-eval --watch --tensorboard-dir: one scalar per task, metric and checkpoint, equal to the ledger's" {
	cd "$BATS_TEST_TMPDIR"
	run -0 --separate-stderr train --save "$PWD/ck" --save-interval 5 --tensorboard-dir tb
	run -0 --separate-stderr mt-eval -q --watch ck --ledger ledger.jsonl --valid --eval-samples 8 --tensorboard-dir tb
	[ "$(ls tb | wc -l)" -eq 2 ]
	# nothing new: no new event file
	run -0 --separate-stderr mt-eval -q --watch ck --ledger ledger.jsonl --valid --eval-samples 8 --tensorboard-dir tb
	[ "$(ls tb | wc -l)" -eq 2 ]
	run -0 --separate-stderr "${READ[@]}" tb
	echo "$output" > ev.jsonl
	"$PY" - <<'EOF'
import json, math
ev = [json.loads(l) for l in open("ev.jsonl")]
led = [json.loads(l) for l in open("ledger.jsonl")]
assert sorted(r["iteration"] for r in led) == [5, 10, 12], led
for r in led:
    for m, v in r["metrics"].items():
        got = [e["value"] for e in ev if e["tag"] == "eval/valid/" + m and e["step"] == r["iteration"]]
        assert len(got) == 1 and math.isclose(got[0], v, rel_tol=1e-6), (m, r["iteration"], got, v)
# and training's own curve is in the same directory
assert any(e["tag"] == "lm loss" for e in ev)
EOF
	run -2 --separate-stderr mt-eval --load ck --valid --tensorboard-dir tb
	[[ $stderr == *"--tensorboard-dir goes with --watch"* ]]
}

@test "Megatron's GPT-3 175B example: every argument of it passes --dry-run unchanged" {
	cd "$BATS_TEST_TMPDIR"
	# the script's variables, as its positional arguments set them
	mapfile -t ARGS < <(grep -v '^#' "$MT_ROOT/tests/reference/gpt3-175b-args.txt" |
		sed -e "s|\$CHECKPOINT_PATH|$PWD/ck|; s|\$TENSORBOARD_LOGS_PATH|$PWD/tb|; s|\$DATA_PATH|$PWD/data_text_document|" \
		    -e "s|\$VOCAB_FILE|$BATS_FILE_TMPDIR/tok-vocab.json|; s|\$MERGE_FILE|$BATS_FILE_TMPDIR/tok-merges.txt|")
	[ "${#ARGS[@]}" -eq 67 ]
	run -0 --separate-stderr mt-train --dry-run --world-size 1024 "${ARGS[@]}"
	echo "$output"
	[[ $output == *"ranks: 1024 = tensor 8 x data 8 x pipeline 16"* ]]
	[[ $output == *"batch: global 1536 = micro 1 x data-parallel 8 x 192 accumulation steps"* ]]
	# the step schedule's thresholds are tokens: 2.4B tokens are 1171875 samples of 2048
	[[ $output == *"batch-size schedule: 16 from 0 tokens (sample 0), 320 from 2.4e+09 tokens (sample 1171875)"* ]]
	[[ $output == *"1536 from 1.2e+10 tokens (sample 5859375)"* ]]
	[[ $stderr == *"--attention-backend: ignored"* ]]
	# the dry run writes nothing
	[ ! -e tb ] && [ ! -e ck ]
	# a schedule that disagrees with --global-batch-size, or a batch that does not divide
	run -2 --separate-stderr mt-train --dry-run --world-size 1024 "${ARGS[@]}" --global-batch-size 1024
	[[ $stderr == *"ends at a batch of 1536 but --global-batch-size is 1024"* ]]
	run -2 --separate-stderr mt-train --dry-run --world-size 1024 "${ARGS[@]}" --step-batch-size-schedule "0:12 1B:1536"
	[[ $stderr == *"batch 12 is not a multiple of micro-batch x data-parallel size 8"* ]]
	run -2 --separate-stderr mt-train --dry-run "${ARGS[@]}" --step-batch-size-schedule "5:16 1B:1536"
	[[ $stderr == *"thresholds must start at 0"* ]]
}

@test "Megatron flags: internals accepted with a note, missing features refused by name (exit 2)" {
	cd "$BATS_TEST_TMPDIR"
	D=(--config "$MT_ROOT/share/configs/tiny.conf" --vocab-size 256 --micro-batch-size 2 --dry-run)
	for f in "--attention-backend flash" --use-flash-attn --no-masked-softmax-fusion --overlap-grad-reduce \
		"--transformer-impl transformer_engine" "--context-parallel-size 1" "--ckpt-format torch_dist"; do
		# shellcheck disable=SC2086
		run -0 --separate-stderr mt-train "${D[@]}" $f
		[[ $stderr == *"${f%% *}: ignored"* || $f == *"size 1" ]]
	done
	run -2 --separate-stderr mt-train "${D[@]}" --attention-backend fastest
	[[ $stderr == *"must be flash, fused, unfused, local or auto"* ]]
	run -2 --separate-stderr mt-train "${D[@]}" --num-experts 8
	[[ $stderr == *"--num-experts: mt does not have mixture of experts"* ]]
	run -2 --separate-stderr mt-train "${D[@]}" --context-parallel-size 2
	[[ $stderr == *"context parallelism"* ]]
	run -2 --separate-stderr mt-train "${D[@]}" --fp8-format hybrid
	[[ $stderr == *"FP8 training"* ]]
}

@test "the checked-in protobuf-c code is what protoc-c makes of tfevent.proto (make proto)" {
	command -v protoc-c >/dev/null || skip "protoc-c not found (scripts/install-deps.sh --test installs protobuf-c-compiler)"
	cd "$BATS_TEST_TMPDIR"
	cp "$MT_ROOT/lib/base/tfevent.proto" .
	protoc-c --c_out=. tfevent.proto
	cmp tfevent.pb-c.c "$MT_ROOT/lib/base/tfevent.pb-c.c"
	cmp tfevent.pb-c.h "$MT_ROOT/lib/base/tfevent.pb-c.h"
}

@test "set-up: the README's two commands, the test one with --test, and CI runs exactly the README's test command" {
	grep -qx 'scripts/install-deps.sh && make -j"$(nproc)" demo' "$MT_ROOT/README.md"
	grep -qx 'scripts/install-deps.sh --test && make -j"$(nproc)" test' "$MT_ROOT/README.md"
	[ "$(tail -1 "$MT_ROOT/.ci/run")" = 'scripts/install-deps.sh --test && make -j"$(nproc)" test' ]
	# the test-only packages are not in the plain list
	run -0 bash -c "sed -n '/^PACKAGES=(/,/^)/p' '$MT_ROOT/scripts/install-deps.sh'"
	[[ $output != *python3-torch* && $output != *bats* && $output != *slurmd* ]]
	[[ $output == *libprotobuf-c-dev* && $output == *libisal-dev* ]]
	run -2 "$MT_ROOT/scripts/install-deps.sh" --no-such-flag
}
