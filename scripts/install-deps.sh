#!/usr/bin/env bash
# Install the Debian/Ubuntu packages mt needs. Idempotent: packages already present are
# left alone, and apt is not touched at all when nothing is missing. Works as root or
# through sudo.
#
#   scripts/install-deps.sh          what building mt and running the demo need
#   scripts/install-deps.sh --test   that, plus what only the test suite needs (references
#                                    such as PyTorch and numpy, Slurm, node, bats, ...)
#
# This is the one list of system dependencies; later features add to it here.
set -euo pipefail

TEST=0
case ${1:-} in
--test) TEST=1 ;;
"") ;;
-h | --help) sed -n '2,9p' "$0"; exit 0 ;;
*) printf 'install-deps: error: unknown argument %s (try --test)\n' "$1" >&2; exit 2 ;;
esac

# building and the demo
PACKAGES=(
  build-essential      # gcc, make
  pkg-config
  libhdf5-dev          # checkpoints
  libxxhash-dev        # XXH3-64 checksums of checkpoint tensors
  mpich libmpich-dev   # process bootstrap, CPU collectives
  libarchive-dev       # compressed and archived input
  zlib1g-dev           # CRC-32 of the ZIP members of Megatron-LM checkpoints (torch.save files)
  libopenblas-openmp-dev   # CPU matmuls (the OpenMP build: the trainer's loops use OpenMP)
  libjansson-dev       # JSON lines
  nettle-dev           # MD5 of Megatron's index-cache descriptions
  libpcre2-dev         # tokenizer pre-tokenization patterns
  libmicrohttpd-dev    # mt-generate --server (Megatron's REST interface)
  libprotobuf-c-dev    # TensorBoard event files: the Event/Summary messages (lib/base/tfevents.c)
  libisal-dev          # TensorBoard event files: the TFRecords' CRC32C (ISA-L's crc32_iscsi)
  libsentencepiece-dev # SentencePiece tokenizers (tokenizer.model; lib/text/spmodel.cc)
  libutf8proc-dev      # tokenizer.json normalizers (NFC, NFKC, NFD, NFKD)
  python3              # the demo corpus generator (share/demo/make-corpus.py)
  zstd                 # the demo's compressed corpus
)
# only the tests: independent references, fixtures, the test runners
TEST_PACKAGES=(
  python3-sentencepiece   # reference ids of the SentencePiece tokenizers in the tests
  unicode-data         # code point ages for the Unicode 9.0 normalizer reference (tests/reference/unicode9-normalize.py)
  bats                 # command-line tests
  gzip xz-utils bzip2 zip   # test fixtures in every compression libarchive reads (zstd is above)
  time                 # /usr/bin/time -v for memory-bound checks
  python3-numpy        # independent reference of Megatron's sample indices (numpy's RandomState)
  python3-torch        # independent PyTorch reference of the GPT model (tests/reference/torch_gpt.py)
  python3-h5py         # that reference reads mt's HDF5 checkpoints
  python3-protobuf python3-crcmod   # the independent TensorBoard event-file reader (tests/reference/tfevents_read.py)
  protobuf-c-compiler  # the check that lib/base/tfevent.pb-c.[ch] match tfevent.proto
  clang libclang-rt-14-dev   # libFuzzer for the dataset reader's fuzz test
  curl                 # the server's tests
  munge slurmctld slurmd slurm-client   # a real one-node Slurm for the template tests (tests/slurm/)
)
# Needed as commands rather than as particular packages: a node from another
# source (NodeSource ships npm inside nodejs) is fine. command:package (tests only)
TEST_COMMANDS=(
  node:nodejs          # tokenizer reference ids in the tests (npm's tiktoken)
  npm:npm
)
COMMANDS=()
if ((TEST)); then
  PACKAGES+=("${TEST_PACKAGES[@]}")
  COMMANDS+=("${TEST_COMMANDS[@]}")
fi

say() { printf 'install-deps: %s\n' "$*" >&2; }
die() { printf 'install-deps: error: %s\n' "$*" >&2; exit 1; }

command -v dpkg-query >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 ||
  die "this script needs a Debian or Ubuntu system (dpkg and apt-get not found); install by hand: ${PACKAGES[*]}"

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ $status == "install ok installed" ]] || missing+=("$p")
done

for c in ${COMMANDS[@]+"${COMMANDS[@]}"}; do
  command -v "${c%%:*}" >/dev/null 2>&1 || missing+=("${c#*:}")
done

if ((${#missing[@]} == 0)); then
  say "all ${#PACKAGES[@]} packages already installed"
  exit 0
fi

if ((EUID == 0)); then
  SUDO=()
elif command -v sudo >/dev/null 2>&1; then
  SUDO=(sudo)
  say "not root: using sudo"
else
  die "missing packages (${missing[*]}) and not root, and sudo is not available; run as root"
fi

say "installing ${#missing[@]} missing package(s): ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -q ||
  die "apt-get update failed: check the network or the apt sources"
"${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" ||
  die "apt-get install failed for: ${missing[*]}"
say "done"
