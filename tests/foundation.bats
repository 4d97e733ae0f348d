#!/usr/bin/env bats
# The common library as tools use it: the input layer through pipes and
# archives, atomic output under kill, the progress meter's tty rule.
load helpers

setup() {
	cd "$BATS_TEST_TMPDIR"
	seq 1 200000 > plain.txt
	printf 'two\n' > b.txt
}

@test "stdin, compressed stdin and files read back the same bytes" {
	run -0 bash -c 'input-cat - < plain.txt | cmp - plain.txt'
	run -0 bash -c 'gzip -c plain.txt | input-cat - | cmp - plain.txt'
	run -0 bash -c 'xz -c plain.txt | input-cat - | cmp - plain.txt'
	run -0 bash -c 'zstd -q -c plain.txt | input-cat - | cmp - plain.txt'
	tar cf - plain.txt b.txt | zstd -q > both.tar.zst
	run -0 bash -c 'input-cat both.tar.zst | cmp - <(cat plain.txt b.txt)'
}

@test "a truncated archive is an error naming the file, exit 3" {
	tar czf both.tgz plain.txt b.txt
	head -c 20000 both.tgz > cut.tgz
	run -3 --separate-stderr input-cat cut.tgz
	[[ $stderr == "input-cat: error: "*"'cut.tgz'"* ]]
}

@test "an empty archive is read as such, with a warning" {
	tar cf empty.tar --files-from /dev/null
	run -0 --separate-stderr input-cat empty.tar
	[ -z "$output" ]
	[[ $stderr == *"warning: 'empty.tar' holds no files"* ]]
}

@test "a missing input is an i/o error, exit 4" {
	run -4 --separate-stderr input-cat nope.txt
	[[ $stderr == "input-cat: error: cannot open 'nope.txt': No such file or directory" ]]
}

# Start atomic-write on a producer that sends some data and then stalls;
# sets $writer and $producer. Background jobs close fd 3 so Bats does not wait.
start_stalled_writer() {
	rm -f feed && mkfifo feed
	( head -c 100000 /dev/urandom; exec sleep 60 ) > feed 3>&- &
	producer=$!
	atomic-write "$1" < feed 3>&- &
	writer=$!
	for _ in $(seq 1 50); do # wait until the writer holds its temporary
		ls "$1".tmp.* >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	return 1
}

stop() {
	kill "-$1" "$writer"
	wait "$writer" || true
	kill "$producer" 2>/dev/null || true
}

@test "a writer killed mid-write leaves no partial output and the old file intact" {
	echo "previous good content" > out.bin
	start_stalled_writer out.bin
	stop KILL
	[ "$(cat out.bin)" = "previous good content" ]
	rm -f out.bin.tmp.*

	start_stalled_writer fresh.bin
	stop KILL
	[ ! -e fresh.bin ]
}

@test "SIGTERM mid-write also removes the temporary file" {
	start_stalled_writer out.bin
	stop TERM
	[ ! -e out.bin ]
	run ls out.bin.tmp.*
	[ "$status" -ne 0 ]
}

@test "a complete write commits the whole input" {
	head -c 3000000 /dev/urandom > src
	run -0 atomic-write dst.bin < src
	cmp src dst.bin
	run ls dst.bin.tmp.*
	[ "$status" -ne 0 ]
}

@test "progress is silent when stderr is not a terminal" {
	seq 1 6000000 > text
	input-cat text 2> err.log > /dev/null
	[ ! -s err.log ]
}

@test "progress shows rate and eta on a terminal, and -q silences it" {
	command -v script >/dev/null || skip "script(1) not installed"
	# a slow producer so the meter has time to draw
	mkfifo slow
	( for i in $(seq 1 8); do yes | head -c 1000000; sleep 0.2; done > slow ) 3>&- &
	script -qec "$(command -v input-cat) $PWD/slow 2>&1 >/dev/null" /dev/null > tty.log
	grep -q 'input-cat: .*B/s' tty.log
	( for i in $(seq 1 8); do yes | head -c 1000000; sleep 0.2; done > slow ) 3>&- &
	script -qec "$(command -v input-cat) -q $PWD/slow 2>&1 >/dev/null" /dev/null > tty-q.log
	! grep -q 'B/s' tty-q.log
}
