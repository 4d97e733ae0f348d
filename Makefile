# mt: one non-recursive Makefile (docs/architecture.md).
#
#   make               libmt.a, libmt_cuda.a when nvcc is found, and build/bin/mt-*
#                      (tool sources in bin/, every output under build/)
#   make CUDA=0        CPU-only build
#   make test          layering check, unit tests, then the Bats suites; ends "N passed, N failed"
#   make check-layers  no #include points up a layer or closes a ring, every lib/ file named in docs/architecture.md,
#                      no lib/ file over 1,500 lines, no lib/train/ or bin/ function over 200 (scripts/check-layers.sh)
#   make demo          the demo pipeline on the built-in corpus
#   make fuzz          fuzz the .idx reader for 20 s (clang, libFuzzer)
#   make sanitize      the tools built with AddressSanitizer and UBSan, CPU-only, in
#                      $(BUILD)-san/bin (the same as make SANITIZE=1 BUILD=build-san CUDA=0 MPI=0);
#                      make test builds them and runs tests/hostile.bats with them
#   make install       PREFIX=/usr/local DESTDIR= : binaries, docs, share, templates
#   make proto         regenerate lib/base/tfevent.pb-c.[ch] from tfevent.proto (protoc-c)
#   make V=1           show full command lines

VERSION := 0.1.0
PREFIX ?= /usr/local
DESTDIR ?=
BUILD := build

ifeq ($(V),1)
Q :=
msg = @true
else
Q := @
msg = @printf '  %-7s %s\n' $(1) $(2)
endif

CC ?= cc
CXX ?= g++
CFLAGS ?= -O2 -g
CXXFLAGS ?= -O2 -g
WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wno-unused-parameter
# zlib: CRC-32 of Megatron's ZIP checkpoints; libprotobuf-c and libisal: TensorBoard event files
# (lib/base/tfevents.c); sentencepiece and libutf8proc: SentencePiece tokenizers, tokenizer.json normalizers;
# libxxhash: the checkpoints' per-tensor checksums
# HDF5: the serial build by its own name where Debian has it, since installing the
# parallel one (libhdf5-mpich-dev, for bench/ckpt-phdf5.c) points plain "hdf5" at it
HDF5_PKG := $(shell pkg-config --exists hdf5-serial 2>/dev/null && echo hdf5-serial || echo hdf5)
PKGS := libarchive jansson libpcre2-8 nettle $(HDF5_PKG) libmicrohttpd zlib libprotobuf-c libisal sentencepiece libutf8proc libxxhash
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null || echo -larchive -ljansson)
GIT_REV := $(shell git rev-parse --short HEAD 2>/dev/null)
# lib/ holds one folder a layer (docs/architecture.md); includes name the folder
LAYERS := base data text model parallel backend ckpt train infer eval
MT_CPPFLAGS := -D_GNU_SOURCE -Ilib $(PKG_CFLAGS)
# OpenBLAS built for OpenMP: the pthreads build spins its own threads against the
# trainer's OpenMP ones (measured: 10k against 38k tokens/s on the tiny model)
BLAS_DIR := /usr/lib/x86_64-linux-gnu/openblas-openmp
MT_CPPFLAGS += -I/usr/include/x86_64-linux-gnu/openblas-openmp
# sentencepiece's pkg-config also names its trainer library, which mt does not use
LDLIBS := $(filter-out -lsentencepiece_train,$(PKG_LIBS)) -lstdc++ -L$(BLAS_DIR) -Wl,-rpath,$(BLAS_DIR) -lopenblas -fopenmp -lm -lpthread

# CUDA: on when nvcc is found, unless CUDA=0.
NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
ifeq ($(NVCC),)
CUDA ?= 0
else
CUDA ?= 1
endif
ifeq ($(CUDA),1)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCHS := sm_80 sm_90a
NVCC_GENCODE := -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90a,code=sm_90a
NVCCFLAGS ?= -O3 -g -lineinfo
NVCC_ALL := $(NVCCFLAGS) $(NVCC_GENCODE) -std=c++17 -Xcompiler -Wall,-Wextra,-Wno-unused-parameter \
	-Werror=all-warnings -DMT_CUDA_ARCHS='"$(CUDA_ARCHS)"' -Ilib
MT_CPPFLAGS += -DMT_HAVE_CUDA -I$(CUDA_HOME)/include
# NCCL's header for data parallelism on GPUs (lib/nccl.c loads the library at run time)
ifneq ($(wildcard $(CUDA_HOME)/include/nccl.h),)
MT_CPPFLAGS += -DMT_HAVE_NCCL
endif
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcudart_static -ldl -lrt -lstdc++
endif

# MPI for multi-process training (lib/parallel/dist.c, linked into mt-train only): MPICH here
# and in CI, Open MPI or any MPI-3 library elsewhere. Without one (or MPI=0) mt-train
# runs as one process and refuses to be launched as several.
MPI_PKG := $(shell pkg-config --exists mpich 2>/dev/null && echo mpich || (pkg-config --exists ompi-c 2>/dev/null && echo ompi-c))
ifeq ($(MPI_PKG),)
MPI ?= 0
else
MPI ?= 1
endif
ifeq ($(MPI),1)
MPI_CFLAGS := $(shell pkg-config --cflags $(MPI_PKG))
MPI_LIBS := $(shell pkg-config --libs $(MPI_PKG))
else
MPI_CFLAGS := -DMT_NO_MPI
MPI_LIBS :=
endif

# SANITIZE=1: AddressSanitizer and UBSan in every object and tool; a UBSan report stops
# the process as an ASan one does (tests/hostile.bats counts both)
ifeq ($(SANITIZE),1)
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
endif

# no fused multiply-add: Megatron's blend and sample arithmetic must round as numpy's does
ALL_CFLAGS := -std=gnu11 $(WARN) $(CFLAGS) $(SAN_FLAGS) -ffp-contract=off -fopenmp $(MT_CPPFLAGS) -MMD -MP

TOOLS := mt-tokenize mt-index mt-blend mt-train mt-ckpt-reshard mt-eval mt-generate
# a layer may hold one level of folders by concept (lib/backend/cuda/: the CUDA backend)
LIB_SRC := $(wildcard $(LAYERS:%=lib/%/*.c) $(LAYERS:%=lib/%/*/*.c))
# C++ only where a library is C++ (lib/text/spmodel.cc wraps libsentencepiece)
LIB_CXX_SRC := $(wildcard $(LAYERS:%=lib/%/*.cc))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(LIB_CXX_SRC:%.cc=$(BUILD)/%.o)
ALL_CXXFLAGS := -std=gnu++17 -Wall -Wextra -Wno-unused-parameter $(CXXFLAGS) $(MT_CPPFLAGS) -MMD -MP
CU_SRC := $(wildcard kernels/*.cu)
CU_OBJ := $(CU_SRC:%.cu=$(BUILD)/%.o)
TOOL_OBJ := $(BUILD)/bin/tool.o $(BUILD)/bin/dataopts.o $(BUILD)/bin/megatronopts.o
BINS := $(TOOLS:%=$(BUILD)/bin/%)
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BINS := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
HELPER_SRC := $(wildcard tests/helpers/*.c)
HELPER_BINS := $(HELPER_SRC:tests/helpers/%.c=$(BUILD)/tests/%)

LIBMT := $(BUILD)/libmt.a
ifeq ($(CUDA),1)
LIBMT_CUDA := $(BUILD)/libmt_cuda.a
endif
LINK_LIBS := $(LIBMT) $(LIBMT_CUDA) $(LDLIBS) $(CUDA_LIBS)

.PHONY: all test unit bats demo install uninstall clean check-deps check-layers
all: $(BINS)

# Rebuild everything when the flags change (CUDA=0 after a CUDA build, say):
# build/.flags is rewritten only when they differ, and every object depends on it.
FLAGS_FILE := $(BUILD)/.flags
FLAGS_NOW := $(CC) $(ALL_CFLAGS) | $(CXX) $(CXXFLAGS) | $(NVCC) $(NVCC_ALL) | $(LINK_LIBS) | $(MPI_CFLAGS) $(MPI_LIBS) | $(SAN_FLAGS)
ifneq ($(file <$(FLAGS_FILE)),$(FLAGS_NOW))
$(shell mkdir -p $(BUILD))
$(file >$(FLAGS_FILE),$(FLAGS_NOW))
endif
.SECONDARY:

# The version (with the git revision) reaches only version.o, so a new commit
# relinks the tools instead of rebuilding everything.
VERSION_NOW := $(VERSION)$(if $(GIT_REV), ($(GIT_REV)))
VERSION_FILE := $(BUILD)/.version
ifneq ($(file <$(VERSION_FILE)),$(VERSION_NOW))
$(shell mkdir -p $(BUILD))
$(file >$(VERSION_FILE),$(VERSION_NOW))
endif
$(BUILD)/lib/base/version.o: $(VERSION_FILE)
$(BUILD)/lib/base/version.o: ALL_CFLAGS += -DMT_VERSION='"$(VERSION_NOW)"'


$(BUILD)/lib/parallel/dist.o: ALL_CFLAGS += $(MPI_CFLAGS)
$(BUILD)/bin/mt-train: LINK_LIBS += $(MPI_LIBS)
$(BUILD)/tests/test_dist: LINK_LIBS += $(MPI_LIBS)
$(BUILD)/tests/test_trainargs: LINK_LIBS += $(MPI_LIBS)
$(BUILD)/tests/dist-check: LINK_LIBS += $(MPI_LIBS)

$(BUILD)/%.o: %.c $(FLAGS_FILE)
	@mkdir -p $(dir $@)
	$(call msg,CC,$<)
	$(Q)$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(BUILD)/%.o: %.cc $(FLAGS_FILE)
	@mkdir -p $(dir $@)
	$(call msg,CXX,$<)
	$(Q)$(CXX) $(ALL_CXXFLAGS) -c -o $@ $<

$(BUILD)/kernels/%.o: kernels/%.cu $(FLAGS_FILE)
	@mkdir -p $(dir $@)
	$(call msg,NVCC,$<)
	$(Q)$(NVCC) $(NVCC_ALL) -MMD -MP -c -o $@ $<

$(LIBMT): $(LIB_OBJ)
	$(call msg,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/libmt_cuda.a: $(CU_OBJ)
	$(call msg,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

$(BINS): $(BUILD)/bin/%: $(BUILD)/bin/%.o $(TOOL_OBJ) $(LIBMT) $(LIBMT_CUDA)
	$(call msg,LINK,$@)
	$(Q)$(CC) $(CFLAGS) $(SAN_FLAGS) -o $@ $< $(TOOL_OBJ) $(LINK_LIBS)

$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(LIBMT) $(LIBMT_CUDA)
	@mkdir -p $(dir $@)
	$(call msg,LINK,$@)
	$(Q)$(CC) $(CFLAGS) $(SAN_FLAGS) -o $@ $< $(LINK_LIBS)

$(BUILD)/tests/%: $(BUILD)/tests/helpers/%.o $(TOOL_OBJ) $(LIBMT) $(LIBMT_CUDA)
	@mkdir -p $(dir $@)
	$(call msg,LINK,$@)
	$(Q)$(CC) $(CFLAGS) $(SAN_FLAGS) -o $@ $< $(TOOL_OBJ) $(LINK_LIBS)

# make test: unit tests, then Bats, one summary line; non-zero on any failure. The
# sanitized tools come first, so tests/hostile*.bats run with them (SANITIZE=0 skips them).
SAN_BUILD := $(BUILD)-san
SAN_TOOLS := mt-tokenize mt-index mt-blend mt-train mt-eval mt-ckpt-reshard mt-generate
ifeq ($(SANITIZE),)
TEST_SAN := sanitize-tools
TEST_ENV := MT_SAN_BUILD=$(SAN_BUILD)
endif
test: $(BINS) $(UNIT_BINS) $(HELPER_BINS) $(TEST_SAN)
	$(Q)BUILD=$(BUILD) $(TEST_ENV) tests/run.sh

# make sanitize: every tool with ASan and UBSan (CPU-only, one process: CUDA=0 MPI=0);
# sanitize-tools: the ones tests/hostile.bats and tests/hostile-ckpt.bats run
.PHONY: sanitize sanitize-tools
sanitize:
	$(Q)$(MAKE) --no-print-directory SANITIZE=1 BUILD=$(SAN_BUILD) CUDA=0 MPI=0 all
sanitize-tools:
	$(Q)$(MAKE) --no-print-directory SANITIZE=1 BUILD=$(SAN_BUILD) CUDA=0 MPI=0 $(SAN_TOOLS:%=$(SAN_BUILD)/bin/%)

check-layers:
	$(Q)scripts/check-layers.sh

# The protobuf-c code of TensorBoard's event messages is checked in (so building needs
# only the library, not protoc-c); regenerate it after editing the .proto.
.PHONY: proto
proto:
	$(Q)cd lib/base && protoc-c --c_out=. tfevent.proto

demo: $(BINS)
	$(Q)scripts/demo.sh

# make fuzz: libFuzzer on the dataset reader for FUZZ_SECONDS (default 20); needs clang
# (tests/fuzz/run.sh builds its own sanitized objects under $(BUILD)/fuzz/)
.PHONY: fuzz
fuzz:
	$(Q)BUILD=$(BUILD) tests/fuzz/run.sh

install: $(BINS)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/mt $(DESTDIR)$(PREFIX)/share/doc/mt
	install -m 755 $(BINS) $(DESTDIR)$(PREFIX)/bin/
	cp -R share/. $(DESTDIR)$(PREFIX)/share/mt/
	cp -R templates $(DESTDIR)$(PREFIX)/share/mt/
	cp -R slurm $(DESTDIR)$(PREFIX)/share/mt/
	install -m 644 README.md docs/*.md $(DESTDIR)$(PREFIX)/share/doc/mt/

uninstall:
	rm -f $(TOOLS:%=$(DESTDIR)$(PREFIX)/bin/%)
	rm -rf $(DESTDIR)$(PREFIX)/share/mt $(DESTDIR)$(PREFIX)/share/doc/mt

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
