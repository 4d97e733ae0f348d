#!/usr/bin/env bats
# mt-train with pipeline parallelism on CPU ranks (MPICH): GPT-2-style and Llama-style tiny
# models of 4 layers over 2 and 4 stages with 1F1B, 2 stages of 2 virtual stages each
# (interleaved), 2 stages with ZB-H1, and tensor x pipeline x data parallelism (8 ranks),
# against one process from the same initial weights; two runs of one layout bit-identical;
# checkpoints written at PP=4 and TP=2 x PP=2 resumed at one process and the reverse; the
# errors before work.
load helpers
cpu_only

setup_file() {
	cd "$BATS_FILE_TMPDIR"
	# the corpus of mt-train-tp.bats: 60 symbols, padded to 64 with divisible-by 16
	python3 "$MT_ROOT/share/markov/make-markov.py" --vocab 60 --docs 600 > mk.jsonl 2> /dev/null
	mt-tokenize -q --input mk.jsonl --tokenizer-type NullTokenizer --vocab-size 60 --output-prefix mk
}

setup() {
	command -v mpiexec >/dev/null || skip "mpiexec not found (scripts/install-deps.sh installs MPICH)"
	cd "$BATS_TEST_TMPDIR"
	F=$BATS_FILE_TMPDIR
	export OMP_NUM_THREADS=1
	# 8 samples a step: 4 micro-batches of 2 (2 each at DP=2), so 4 stages see a full pipeline
	DATA=(--data-path "$F/mk_text_document" --tokenizer-type NullTokenizer --vocab-size 60 --split 95,5,0
		--data-cache-path "$F/cache" --make-vocab-size-divisible-by 16 --lr 1e-3 --lr-decay-style cosine
		--lr-warmup-iters 2 --clip-grad 1.0 --weight-decay 0.1 --log-interval 1 --distributed-timeout-seconds 120
		--micro-batch-size 2 --global-batch-size 8 --seq-length 32 --max-position-embeddings 32 -q)
	GPT=(--config "$MT_ROOT/share/configs/tiny.conf" --num-layers 4 "${DATA[@]}")
	# Llama-style: RoPE, RMSNorm, SwiGLU, no biases, untied output, 8 heads in 4 query groups
	LLAMA=(--config "$MT_ROOT/share/configs/llama-tiny.conf" --num-layers 4 --num-attention-heads 8 --num-query-groups 4
		"${DATA[@]}")
}

# per-step loss and gradient norm of two JSON logs within a relative tolerance (default 1e-5)
close() {
	python3 - "$1" "$2" "${3:-1e-5}" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
tol = float(sys.argv[3])
assert len(a) == len(b) and len(a) > 0, (len(a), len(b))
worst = 0.0
for x, y in zip(a, b):
    assert x["iteration"] == y["iteration"], (x, y)
    for k in ("loss", "grad_norm"):
        r = abs(x[k] - y[k]) / abs(x[k])
        worst = max(worst, r)
        assert r <= tol, "iteration %d %s: %r against %r (relative %.3g)" % (x["iteration"], k, x[k], y[k], r)
print("worst relative difference %.3g over %d steps" % (worst, len(a)))
PY
}

# the fields that must be identical between two runs of one layout
fields() {
	python3 -c 'import json,sys; [print(json.dumps({k: d[k] for k in ("iteration", "loss", "lr", "grad_norm")})) for d in map(json.loads, open(sys.argv[1]))]' "$1"
}

# every schedule of the acceptance list against one process, for one model ($EXTRA3D:
# more flags for the 3D run)
schedules() {
	M=("$@" --train-iters 10)
	mt-train "${M[@]}" --log-json one.jsonl
	[ "$(wc -l < one.jsonl)" -eq 10 ]
	mpiexec -n 2 mt-train "${M[@]}" --pipeline-model-parallel-size 2 --log-json pp2.jsonl
	close one.jsonl pp2.jsonl
	mpiexec -n 4 mt-train "${M[@]}" --pipeline-model-parallel-size 4 --log-json pp4.jsonl
	close one.jsonl pp4.jsonl
	mpiexec -n 2 mt-train "${M[@]}" --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 \
		--log-json vp.jsonl
	close one.jsonl vp.jsonl
	mpiexec -n 2 mt-train "${M[@]}" --pipeline-model-parallel-size 2 --pipeline-schedule zb-h1 --log-json zb.jsonl
	close one.jsonl zb.jsonl
	mpiexec -n 8 mt-train "${M[@]}" --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
		--use-distributed-optimizer ${EXTRA3D:-} --log-json 3d.jsonl
	close one.jsonl 3d.jsonl
	# the log says which schedule ran and what each stage measured
	python3 -c '
import json, sys
for f, s in (("pp4.jsonl", "1f1b"), ("vp.jsonl", "interleaved"), ("zb.jsonl", "zb-h1")):
    d = json.loads(open(f).readline())
    assert d["pp_schedule"] == s and len(d["pp_bubble"]) == (4 if f == "pp4.jsonl" else 2), d
    assert d["pp_bytes_per_step"] > 0, d'
}

@test "GPT-2-style (tied embeddings): PP=2 and PP=4 (1F1B), PP=2 x 2 virtual stages, PP=2 ZB-H1, TP=2 x PP=2 x DP=2, within 1e-5 of one process" {
	# the 3D run with sequence parallelism: the stages send each other sequence shards
	EXTRA3D=--sequence-parallel schedules "${GPT[@]}"
	# the comparison can fail: another seed is another model
	mt-train "${GPT[@]}" --train-iters 10 --seed 7 --log-json other.jsonl
	run ! close one.jsonl other.jsonl
}

@test "Llama-style (GQA, SwiGLU, RoPE, untied): PP=2 and PP=4 (1F1B), PP=2 x 2 virtual stages, PP=2 ZB-H1, TP=2 x PP=2 x DP=2, within 1e-5 of one process" {
	schedules "${LLAMA[@]}"
}

@test "two runs of one layout are bit-identical (PP=4; TP=2 x PP=2 with sequence parallelism and ZB-H1)" {
	for f in "4 --pipeline-model-parallel-size 4" \
		"4 --pipeline-model-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel --pipeline-schedule zb-h1"; do
		set -- $f
		n=$1
		shift
		mpiexec -n "$n" mt-train "${GPT[@]}" --train-iters 5 "$@" --save A --log-json A.jsonl
		mpiexec -n "$n" mt-train "${GPT[@]}" --train-iters 5 "$@" --save B --log-json B.jsonl
		diff <(fields A.jsonl) <(fields B.jsonl)
		[ "$(ckpt-hash A)" = "$(ckpt-hash B)" ]
		rm -rf A B A.jsonl B.jsonl
	done
}

@test "a PP=4 checkpoint holds the one-process tensors and resumes at PP=1; a PP=1 checkpoint resumes at PP=4" {
	# two steps after the checkpoint: the second one's loss depends on the AdamW moments
	M=("${GPT[@]}" --train-iters 7)
	mpiexec -n 4 mt-train "${M[@]}" --pipeline-model-parallel-size 4 --save A --save-interval 5 --log-json A.jsonl
	mt-train "${M[@]}" --save one --save-interval 5 --log-json one.jsonl
	# the same tensors, names and global shapes as a checkpoint of one process (the last
	# stage's copy of the tied embedding is not one of them)
	diff <(mt-ckpt-reshard inspect A/iter_0000005 | grep "^tensor" | cut -f1-4) \
		<(mt-ckpt-reshard inspect one/iter_0000005 | grep "^tensor" | cut -f1-4)
	rm -rf R && mkdir R && cp -R A/iter_0000005 R/ && echo 5 > R/latest
	mt-train "${M[@]}" --load R --save R --log-json R.jsonl
	close <(tail -2 A.jsonl) R.jsonl
	rm -rf R && mkdir R && cp -R one/iter_0000005 R/ && echo 5 > R/latest
	mpiexec -n 4 mt-train "${M[@]}" --pipeline-model-parallel-size 4 --load R --save R --log-json R4.jsonl
	close <(tail -2 one.jsonl) R4.jsonl
}

@test "a TP=2 x PP=2 checkpoint resumes at TP=1 x PP=1, and a TP=1 x PP=1 checkpoint at TP=2 x PP=2" {
	M=("${LLAMA[@]}" --train-iters 7)
	mpiexec -n 4 mt-train "${M[@]}" --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --save A \
		--save-interval 5 --log-json A.jsonl
	mt-train "${M[@]}" --save one --save-interval 5 --log-json one.jsonl
	rm -rf R && mkdir R && cp -R A/iter_0000005 R/ && echo 5 > R/latest
	mt-train "${M[@]}" --load R --save R --log-json R.jsonl
	close <(tail -2 A.jsonl) R.jsonl
	rm -rf R && mkdir R && cp -R one/iter_0000005 R/ && echo 5 > R/latest
	mpiexec -n 4 mt-train "${M[@]}" --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --load R --save R \
		--log-json R4.jsonl
	close <(tail -2 one.jsonl) R4.jsonl
}

@test "pipeline parallelism's errors before work: layers, virtual stages, micro-batch counts, schedules, devices" {
	run -2 --separate-stderr mt-train "${GPT[@]}" --train-iters 1 --num-layers 6 --pipeline-model-parallel-size 4
	[[ $stderr == *"--num-layers 6 is not a multiple of --pipeline-model-parallel-size 4"* ]] || { echo "$stderr"; false; }
	run -2 --separate-stderr mt-train "${GPT[@]}" --train-iters 1 --pipeline-model-parallel-size 2 \
		--num-layers-per-virtual-pipeline-stage 3
	[[ $stderr == *"--num-layers-per-virtual-pipeline-stage 3"* ]] || { echo "$stderr"; false; }
	# the interleaved schedule's micro-batch rule (Megatron's): 6 is neither a multiple of 4 nor leaves 4
	run -2 --separate-stderr mpiexec -n 4 mt-train "${GPT[@]}" --train-iters 1 --num-layers 8 \
		--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 1 --global-batch-size 12
	[[ $stderr == *"micro-batches per step (6)"*"group of 4"* ]] || { echo "$stderr"; false; }
	run -2 --separate-stderr mt-train "${GPT[@]}" --train-iters 1 --pipeline-model-parallel-size 2 \
		--num-layers-per-virtual-pipeline-stage 1 --pipeline-schedule zb-h1
	[[ $stderr == *"zb-h1"*"virtual stages"* ]] || { echo "$stderr"; false; }
	run -2 --separate-stderr mt-train "${GPT[@]}" --train-iters 1 --pipeline-schedule gpipe
	[[ $stderr == *"--pipeline-schedule must be 1f1b, interleaved or zb-h1"* ]] || { echo "$stderr"; false; }
	run -2 --separate-stderr mpiexec -n 3 mt-train "${GPT[@]}" --train-iters 1 --pipeline-model-parallel-size 2
	[[ $stderr == *"world size 3"*"2"* ]] || { echo "$stderr"; false; }
	# an uneven first and last stage: 1 + 2 + 1 layers over 3 stages trains like one process
	M=("${GPT[@]}" --train-iters 3)
	mt-train "${M[@]}" --log-json one.jsonl
	mpiexec -n 3 mt-train "${M[@]}" --global-batch-size 6 --pipeline-model-parallel-size 3 \
		--decoder-first-pipeline-num-layers 1 --decoder-last-pipeline-num-layers 1 --log-json un.jsonl
	mt-train "${M[@]}" --global-batch-size 6 --log-json one6.jsonl
	close one6.jsonl un.jsonl
}

@test "SIGTERM to one stage: every stage stops after the same step, the checkpoint is whole and resumes" {
	M=("${GPT[@]}" --train-iters 100000 --log-interval 100000)
	MT_TEST_TAG=sig$$ mpiexec -n 4 mt-train "${M[@]}" --pipeline-model-parallel-size 4 --save A 2> err.txt &
	pid=$!
	# the last stage's rank, once the run is stepping
	for _ in $(seq 1 100); do [ -n "$(rank_pid sig$$ 3)" ] && break; sleep 0.1; done
	sleep 2
	kill -TERM "$(rank_pid sig$$ 3)"
	wait "$pid"
	cat err.txt
	it=$(cat A/latest)
	[ "$it" -gt 0 ] && [ "$it" -lt 100000 ]
	run -0 ckpt-hash A
	[[ $output == "iteration $it "* ]]
	# one process resumes the 4 stages' checkpoint
	mt-train "${M[@]}" --train-iters $((it + 2)) --load A --save A
	[ "$(cat A/latest)" = $((it + 2)) ]
}

@test "a stage that stops answering is named by its neighbours within the timeout, and the job ends" {
	# stage 2 of 4 (rank 2) stops in its schedule at step 2: the stages next to it wait for it
	run -4 --separate-stderr env MT_TEST_HANG_RANK=2 MT_TEST_HANG_STEP=2 MT_TEST_HANG_BACKWARD=1 \
		timeout 60 mpiexec -n 4 mt-train "${GPT[@]}" --train-iters 4 --pipeline-model-parallel-size 4 \
		--distributed-timeout-seconds 3
	[[ $stderr == *"from rank 2 (tp 0, dp 0, pp 2) at step 2 did not complete within 3 s"* ]] || { echo "$stderr"; false; }
}

@test "--dry-run per stage: parameters, activations in flight for the schedule, bubble, point-to-point bytes" {
	D=("${GPT[@]}" --train-iters 1 --dry-run --world-size 8 --num-layers 8 --pipeline-model-parallel-size 4)
	run -0 --separate-stderr mt-train "${D[@]}"
	echo "$output"
	[[ $output == *"pipeline: 4 stages x 1 model chunk(s), schedule 1f1b, 2 micro-batches a step: bubble (p-1)/m = 1.5000"* ]]
	# 2 micro-batches a data-parallel rank: the first stage keeps both, the last one
	[[ $output == *$'\n0\t0..1\t'*$'\t2.00\t'* ]]
	[[ $output == *$'\n3\t6..7\t'*$'\t1.00\t'* ]]
	[[ $output == *"busiest stage: "* ]]
	run -0 --separate-stderr mt-train "${D[@]}" --world-size 4 --num-layers-per-virtual-pipeline-stage 1
	[[ $output == *"schedule interleaved, 4 micro-batches a step: bubble (p-1)/(v m) = 0.3750"* ]]
	[[ $output == *$'\n0\t0..0,4..4\t'* ]]
	run -0 --separate-stderr mt-train "${D[@]}" --pipeline-schedule zb-h1
	[[ $output == *"schedule zb-h1"*"= 0.5000 of the ideal step"* ]]
	# the full-size plan of the 175B template
	run -0 --separate-stderr env MT_DRY_RUN=1 MT_BIN="$MT_BUILD/bin" CONFIG="$MT_ROOT/share/configs/gpt-175b.conf" \
		bash "$MT_ROOT/templates/gpt-175b.sbatch"
	[[ $output == *"ranks: 1024 = tensor 8 x data 8 x pipeline 16"* ]]
	[[ $output == *"pipeline: 16 stages x 1 model chunk(s), schedule 1f1b, 192 micro-batches a step"* ]]
}
