#!/usr/bin/env bats
# The process grid under mpiexec (MPICH): each group's communicator (lib/parallel/dist.c,
# mt_dist_group) holds the ranks of Megatron's order, against the worked example of
# specs/megatron-parallel.md and an independent formula; the tensor-parallel operations
# (lib/parallel/tpcomm.c) give known sums in rank order, bit for bit on every rank; a hang in
# a group names both ranks' coordinates. The checks themselves: tests/helpers/dist-check.c.
load helpers
cpu_only

setup() {
	command -v mpiexec >/dev/null || skip "mpiexec not found (scripts/install-deps.sh installs MPICH)"
	cd "$BATS_TEST_TMPDIR"
	export OMP_NUM_THREADS=1
}

# The lines dist-check grid prints, from global = t + tp (d + dp p) (Megatron's
# tp-dp-pp order) and nothing of mt's: every group is the ranks that differ from r in
# that coordinate only; the embedding group the first and last stage of r's pipeline.
expected_grid() {
	python3 - "$@" <<'EOF'
import sys
W, T, P = map(int, sys.argv[1:4])
D = W // (T * P)
g = lambda t, d, p: t + T * (d + D * p)
fmt = lambda rs: "[" + ",".join(map(str, sorted(rs))) + "]"
for r in range(W):
    t, d, p = r % T, (r // T) % D, r // (T * D)
    emb = fmt({g(t, d, 0), g(t, d, P - 1)}) if p in (0, P - 1) else "-"
    print(f"rank {r}: tp {fmt(g(u, d, p) for u in range(T))} dp {fmt(g(t, e, p) for e in range(D))}"
          f" pp {fmt(g(t, d, q) for q in range(P))}"
          f" mp {fmt(g(u, d, q) for u in range(T) for q in range(P))} emb {emb}")
EOF
}

# run dist-check grid on $1 ranks with tp $2, pp $3: all its checks pass, and its
# groups are the expected ones
check_grid() {
	run -0 timeout 120 mpiexec -n "$1" dist-check grid "$2" "$3"
	echo "$output"
	[ "$(grep -c '^ok ' <<<"$output")" -eq 15 ]
	! grep -q '^not ok' <<<"$output"
	diff <(grep '^rank ' <<<"$output") <(expected_grid "$1" "$2" "$3")
}

@test "grid: 16 ranks, tp 2, pp 4: the groups of Megatron's worked example, through the communicators" {
	run -0 timeout 120 mpiexec -n 16 dist-check grid 2 4
	echo "$output"
	! grep -q '^not ok' <<<"$output"
	[ "$(grep -c '^rank ' <<<"$output")" -eq 16 ]
	# specs/megatron-parallel.md section 1, copied: each member of a group lists it
	while read -r kind groups; do
		for grp in $groups; do
			for r in ${grp//[\[\],]/ }; do
				grep -qx "rank $r:.* $kind \\$grp.*" <<<"$output" || { echo "rank $r: no $kind $grp"; false; }
			done
		done
	done <<'EOF'
tp [0,1] [2,3] [4,5] [6,7] [8,9] [10,11] [12,13] [14,15]
dp [0,2] [1,3] [4,6] [5,7] [8,10] [9,11] [12,14] [13,15]
pp [0,4,8,12] [1,5,9,13] [2,6,10,14] [3,7,11,15]
mp [0,1,4,5,8,9,12,13] [2,3,6,7,10,11,14,15]
emb [0,12] [1,13] [2,14] [3,15]
EOF
	# the middle stages are in no embedding group
	for r in 4 5 6 7 8 9 10 11; do grep -qx "rank $r: .* emb -" <<<"$output"; done
}

@test "grid: 8 ranks, tp 2, pp 2: groups, tensor-parallel all-reduce, all-gather, reduce-scatter bit for bit" {
	check_grid 8 2 2
	# the spec's rule by hand for one rank: rank 5 = tp 1, dp 0, pp 1
	grep -qx 'rank 5: tp \[4,5\] dp \[5,7\] pp \[1,5\] mp \[0,1,4,5\] emb \[1,5\]' <<<"$output"
}

@test "grid: 4 ranks as tp 2 x pp 2, tp 4, pp 4 (tensor group of one: copies), tp 2 x dp 2" {
	check_grid 4 2 2
	check_grid 4 4 1
	check_grid 4 1 4
	check_grid 4 2 1
}

@test "grid: one rank, under mpiexec and without it: every group is the rank alone" {
	check_grid 1 1 1
	run -0 dist-check grid 1 1
	[ "$(grep -c '^ok ' <<<"$output")" -eq 15 ]
	grep -qx 'rank 0: tp \[0\] dp \[0\] pp \[0\] mp \[0\] emb \[0\]' <<<"$output"
}

@test "grid: a world that tp x pp does not divide is refused, naming the rank" {
	run ! --separate-stderr timeout 60 mpiexec -n 4 dist-check grid 3 1
	[[ $stderr == *"rank 0: world size 4 is not a multiple of tensor x pipeline parallel size 3 x 1"* ]]
}

@test "grid: a rank that hangs in its tensor-parallel group: the other names both ranks' coordinates" {
	SECONDS=0
	run ! --separate-stderr timeout 60 mpiexec -n 8 dist-check grid 2 2 hang 5
	echo "status $status after $SECONDS s; stderr: $stderr"
	[ "$status" -ne 124 ]
	[[ $stderr == *"rank 4 (tp 0, dp 0, pp 1): rank 5 (tp 1, dp 0, pp 1) did not reach step 7 within 2 s"* ]]
	# the group's rank 0 hangs: its other rank names it after twice the timeout
	run ! --separate-stderr timeout 60 mpiexec -n 8 dist-check grid 2 2 hang 4
	echo "status $status; stderr: $stderr"
	[ "$status" -ne 124 ]
	[[ $stderr == *"rank 5 (tp 1, dp 0, pp 1): rank 4 (tp 0, dp 0, pp 1) did not reach step 7 within 4 s"* ]]
	[ "$SECONDS" -lt 40 ]
}
