# ds4 -- build.  `make` builds everything, `make test` runs all tests
# (the command CI runs), `make bench` runs the benchmarks.
#
#   make                 optimized build for this machine (-O3 -march=native)
#   make PORTABLE=1      no -march=native (SIMD kernels are still chosen at
#                        run time from what the CPU supports)
#   make DEBUG=1         -O0 -g with AddressSanitizer/UBSan
#   make install PREFIX=/usr/local

PREFIX ?= /usr/local
# build in parallel by default (tests still run one after another)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 2)
CC ?= cc
BUILD ?= build

ifeq ($(DEBUG),1)
  OPT = -O0 -g -fsanitize=address,undefined -fno-omit-frame-pointer
  LDOPT = -fsanitize=address,undefined
else ifeq ($(PORTABLE),1)
  OPT = -O3 -g
else
  OPT = -O3 -g -march=native
endif

CFLAGS ?= $(OPT)
CFLAGS += -std=c11 -Wall -Wextra -D_GNU_SOURCE -pthread -MMD -MP -Isrc
LDFLAGS += $(LDOPT) -pthread
LIBS = -ljansson -lm

# Distributed inference (src/dist/, README "Several machines"): built with
# MPI when `mpicc` is found (Open MPI or MPICH; flags from pkg-config mpi-c,
# else from the mpicc wrapper).  NO_MPI=1 builds without; such binaries
# say so in --help and refuse --dist.
ifneq ($(NO_MPI),1)
  MPICC := $(shell command -v mpicc 2>/dev/null)
endif
ifneq ($(MPICC),)
  MPI_CFLAGS := $(shell pkg-config --cflags mpi-c 2>/dev/null || mpicc --showme:compile 2>/dev/null || mpicc -compile_info | sed 's/^[^ ]* //;s/ -c / /')
  MPI_LIBS := $(shell pkg-config --libs mpi-c 2>/dev/null || mpicc --showme:link 2>/dev/null || mpicc -link_info | sed 's/^[^ ]* //')
  $(BUILD)/src/dist/dist.o: CFLAGS += -DDS4_MPI $(MPI_CFLAGS)
  LIBS += $(MPI_LIBS)
endif

# src/ is grouped by concern (one folder a wing); ds4.h, the public API,
# stays at the top.  Wings include each other as "wing/file.h".
LIB_SRCS  := $(wildcard src/*.c src/*/*.c)
LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/%.o)
LIB       := $(BUILD)/libds4.a

CLI_SRCS    := $(wildcard cli/*.c)
SERVER_SRCS := $(wildcard server/*.c)
TEST_SRCS   := $(wildcard tests/test_*.c)
TEST_BINS   := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)
TOOL_SRCS   := $(wildcard tools/ds4_*.c)

BINS := ds4
ifneq ($(SERVER_SRCS),)
  BINS += ds4-server
endif
ifneq ($(wildcard tools/ds4_synth.c),)
  BINS += ds4-synth
endif
ifneq ($(wildcard tools/ds4_bench.c),)
  BINS += ds4-bench
endif
ifneq ($(wildcard tools/ds4_kv.c),)
  BINS += ds4-kv
endif
ifneq ($(wildcard tools/ds4_gguf.c),)
  BINS += ds4-gguf
endif

.PHONY: all test bench bench-kernels bench-tokenizer install clean fuzz tests run FORCE
all: $(BINS) tests

# The version every binary prints (--version): DS4_VERSION from ds4.h plus
# `git describe` of the checkout, kept in a header that is rewritten only
# when the description changes (so a rebuild does not relink everything).
# Outside a git checkout the description is empty: the plain DS4_VERSION.
GIT_DESCRIBE := $(shell git describe --tags --always --dirty 2>/dev/null)
$(BUILD)/gen/ds4_git.h: FORCE
	@mkdir -p $(dir $@)
	@printf '#define DS4_GIT_DESCRIBE "%s"\n' '$(subst ','',$(GIT_DESCRIBE))' > $@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi
$(BUILD)/src/common/version.o: $(BUILD)/gen/ds4_git.h
$(BUILD)/src/common/version.o: CFLAGS += -I$(BUILD)/gen

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

ds4: $(CLI_SRCS:%.c=$(BUILD)/%.o) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS) -ledit

ds4-server: $(SERVER_SRCS:%.c=$(BUILD)/%.o) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS) -lmicrohttpd

ds4-synth: $(BUILD)/tools/ds4_synth.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

ds4-bench: $(BUILD)/tools/ds4_bench.o $(BUILD)/tools/probe.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

ds4-kv: $(BUILD)/tools/ds4_kv.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

ds4-gguf: $(BUILD)/tools/ds4_gguf.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

tests: $(TEST_BINS)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

test: all
	tests/run.sh

bench: all
	bench/run.sh

# kernel throughput vs STREAM and int8/fp32 peaks; BENCH_ARGS="--csv" etc.
bench-kernels: $(BUILD)/bench/bench_kernels
	$(BUILD)/bench/bench_kernels $(BENCH_ARGS)

bench-tokenizer: $(BUILD)/bench/bench_tokenizer
	$(BUILD)/bench/bench_tokenizer $(BENCH_TOK_ARGS)

$(BUILD)/bench/bench_tokenizer: $(BUILD)/bench/bench_tokenizer.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/bench/bench_kernels: $(BUILD)/bench/bench_kernels.o $(BUILD)/tools/probe.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# the main job: chat with ./ds4flash.gguf, or with a generated demo model
run: ds4 ds4-synth
	tools/run_main.sh

# libFuzzer targets (clang); FUZZ_SECONDS per target (default 60)
fuzz:
	fuzz/run.sh

install: $(BINS)
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(BINS) $(DESTDIR)$(PREFIX)/bin/
	install -d $(DESTDIR)$(PREFIX)/share/ds4/vocab
	install -m 644 vocab/deepseek-v4-vocab.gguf $(DESTDIR)$(PREFIX)/share/ds4/vocab/

clean:
	rm -rf $(BUILD) ds4 ds4-server ds4-synth ds4-bench ds4-kv ds4-gguf demo/*.gguf

# keep the objects of tests and benches (intermediate files of a chain)
.SECONDARY:

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# ds4-server under clang's UBSan, float-cast-overflow included (a double
# out of an int's range is undefined), built in its own directory, then the
# server tests against it: tests/t_server.sh fails on any "runtime error:"
# in the server's log.
UBSAN_BUILD ?= build-ubsan
UBSAN_OPT = -O1 -g -fno-omit-frame-pointer -fsanitize=undefined,float-cast-overflow
.PHONY: test-ubsan-server
test-ubsan-server:
	$(MAKE) BUILD=$(UBSAN_BUILD) CC=clang UBSAN_SUB=1 $(UBSAN_BUILD)/ds4-server
	UBSAN_OPTIONS=print_stacktrace=1 DS4_SERVER_BIN=$(UBSAN_BUILD)/ds4-server tests/t_server.sh

ifeq ($(UBSAN_SUB),1)
OPT = $(UBSAN_OPT)
LDOPT = $(UBSAN_OPT)
# the AVX-512 tiles take clang many minutes and gigabytes with UBSan: built
# without it (tests/test_quant checks them against the scalar kernels)
$(BUILD)/src/kernels/quant_vnni.o: OPT = -O1 -g
$(BUILD)/ds4-server: $(SERVER_SRCS:%.c=$(BUILD)/%.o) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS) -lmicrohttpd
endif
