# ds4 -- build.  `make` builds everything, `make test` runs all tests
# (the command CI runs), `make bench` runs the benchmarks.
#
#   make                 optimized build for this machine (-O3 -march=native)
#   make PORTABLE=1      no -march=native (SIMD kernels are still chosen at
#                        run time from what the CPU supports)
#   make DEBUG=1         -O1 -g with AddressSanitizer/UBSan, in its own
#                        tree: objects in build/debug, binaries in
#                        build/debug/bin (the optimized ./ds4 etc. and
#                        build/ stay as they are)
#   make test            the whole suite on the optimized build and on the
#                        DEBUG=1 build, in one pool (what CI runs)
#   make test-opt        the optimized suite only
#   make DEBUG=1 test    the sanitizer suite only
#   make install PREFIX=/usr/local

PREFIX ?= /usr/local
# build in parallel by default (tests/run.sh runs the tests in parallel too)
# (a sub-make shares its parent's job slots: setting -j again would reset them)
ifeq ($(MAKELEVEL),0)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 2)
endif
CC ?= cc

# Tests find the binaries through DS4_BIN_DIR and the test programs through
# DS4_BUILD_DIR (tests/run.sh), so both trees run the same suite.
DEBUG_BUILD = build/debug
ifeq ($(DEBUG),1)
  BUILD ?= $(DEBUG_BUILD)
  BIN_DIR ?= $(BUILD)/bin
  # float-cast-overflow: a double out of an integer's range (e.g. a JSON
  # number cast to int) is undefined behaviour; UBSan leaves it out by default
  # -O1, ASan's recommended level: every access is still instrumented and
  # every UBSan check still inserted, but the intrinsics inline -- the
  # sanitizer suite took 2931 s at -O0 and ~2.4x less at -O1 on the 2-vCPU
  # CI-like VM (t_oracle 504 -> 223 s, t_server 484 -> 188 s).
  OPT = -O1 -g -fsanitize=address,undefined,float-cast-overflow -fno-omit-frame-pointer
  LDOPT = -fsanitize=address,undefined,float-cast-overflow
else
  BUILD ?= build
  BIN_DIR ?= .
  ifeq ($(PORTABLE),1)
    OPT = -O3 -g
  else
    OPT = -O3 -g -march=native
  endif
endif

CFLAGS ?= $(OPT)
# -ffp-contract=off: no a*b+c fused behind our back (clang fuses by
# default): every kernel table gives the same bits only if each FMA is
# written out (docs/NUMERICS.md).
CFLAGS += -std=c11 -ffp-contract=off -Wall -Wextra -D_GNU_SOURCE -pthread -MMD -MP -Isrc
LDFLAGS += $(LDOPT) -pthread
LIBS = -ljansson -lm

# Distributed inference (src/mpi/, docs/distributed.md "Several machines"): built with
# MPI when `mpicc` is found.  MPICC names another wrapper: Open MPI's or
# MPICH's (make MPICC=mpicc.mpich BUILD=build/mpich BIN_DIR=build/mpich/bin:
# its own tree, since mpi.o and the links differ).  Flags come from the
# wrapper (Open MPI: --showme; MPICH: -show, keeping -I/-D for compiling and
# -L/-l/-Wl for linking), else pkg-config mpi-c.  NO_MPI=1 builds without;
# such binaries say so in --help and refuse --dist.
ifneq ($(NO_MPI),1)
  MPICC ?= $(shell command -v mpicc 2>/dev/null)
else
  MPICC :=
endif
ifneq ($(MPICC),)
  ifeq ($(shell command -v $(MPICC) 2>/dev/null),)
    $(error MPICC=$(MPICC): no such MPI compiler wrapper)
  endif
  MPI_CFLAGS := $(shell $(MPICC) --showme:compile 2>/dev/null)
  MPI_LIBS := $(shell $(MPICC) --showme:link 2>/dev/null)
  ifeq ($(strip $(MPI_CFLAGS)$(MPI_LIBS)),)
    MPI_SHOW := $(shell $(MPICC) -show 2>/dev/null)
    ifneq ($(strip $(MPI_SHOW)),)
      MPI_CFLAGS := $(filter -I% -D%,$(MPI_SHOW))
      MPI_LIBS := $(filter -L% -l% -Wl%,$(MPI_SHOW))
    else
      MPI_CFLAGS := $(shell pkg-config --cflags mpi-c 2>/dev/null)
      MPI_LIBS := $(shell pkg-config --libs mpi-c 2>/dev/null)
    endif
  endif
  $(BUILD)/src/mpi/mpi.o: CFLAGS += -DDS4_MPI $(MPI_CFLAGS)
  LIBS += $(MPI_LIBS)
endif

# src/ is grouped by concern (one folder a wing); ds4.h, the public API,
# stays at the top.  Wings include each other as "wing/file.h".
LIB_SRCS  := $(wildcard src/*.c src/*/*.c)
LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/%.o)
LIB       := $(BUILD)/libds4.a

CLI_SRCS    := $(wildcard cli/*.c)
SERVER_SRCS := $(wildcard server/*.c)
AGENT_SRCS  := $(wildcard agent/*.c)
TEST_SRCS   := $(wildcard tests/test_*.c)
TEST_BINS   := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)
TOOL_SRCS   := $(wildcard tools/ds4_*.c)

BINS := ds4
ifneq ($(SERVER_SRCS),)
  BINS += ds4-server
endif
ifneq ($(AGENT_SRCS),)
  BINS += ds4-agent
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
ifneq ($(wildcard tools/ds4_quantize.c),)
  BINS += ds4-quantize
endif
ifneq ($(wildcard tools/ds4_eval.c),)
  BINS += ds4-eval
endif
ifneq ($(wildcard tools/ds4_steer.c),)
  BINS += ds4-steer
endif
ifneq ($(wildcard tools/ds4_gguf.c),)
  BINS += ds4-gguf
endif
# ds4-get (model downloads) needs libcurl's headers (libcurl4-openssl-dev,
# tools/deps.sh); without them it is left out, and make says so.
ifneq ($(wildcard tools/ds4_get.c),)
  ifneq ($(wildcard /usr/include/curl/curl.h /usr/include/*/curl/curl.h)$(shell pkg-config --exists libcurl 2>/dev/null && echo y),)
    BINS += ds4-get
  else
    $(warning libcurl headers not found (sh tools/deps.sh installs them): ds4-get is not built)
  endif
endif

BIN_PATHS := $(addprefix $(BIN_DIR)/,$(BINS))

.PHONY: all test test-opt test-suite test-real bench bench-ab bench-kernels bench-kda bench-attn bench-tokenizer bench-llamacpp bench-glm install clean fuzz tests run FORCE
all: $(BIN_PATHS) tests

# The MPI flags this build uses (tests/t_mpich.sh links against them).
mpi-flags:
	@echo "MPI_CFLAGS=$(MPI_CFLAGS)"
	@echo "MPI_LIBS=$(MPI_LIBS)"
.PHONY: mpi-flags


# The version every binary prints (--version): DS4_VERSION from ds4.h plus
# `git describe` of the checkout, kept in a header that is rewritten only
# when the description changes (so a rebuild does not relink everything).
# Outside a git checkout the description is empty: the plain DS4_VERSION.
GIT_DESCRIBE := $(shell git describe --tags --always --dirty 2>/dev/null)
$(BUILD)/gen/ds4_git.h: FORCE
	@mkdir -p $(dir $@)
	@printf '#define DS4_GIT_DESCRIBE "%s"\n' '$(subst ','',$(GIT_DESCRIBE))' > $@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi
$(BUILD)/src/base/version.o: $(BUILD)/gen/ds4_git.h
$(BUILD)/src/base/version.o: CFLAGS += -I$(BUILD)/gen
# The chat page is embedded by webui.c (.incbin): edits to it rebuild that object.
$(BUILD)/server/webui.o: server/webui/index.html

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BIN_DIR)/ds4: $(CLI_SRCS:%.c=$(BUILD)/%.o) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS) -ledit

$(BIN_DIR)/ds4-server: $(SERVER_SRCS:%.c=$(BUILD)/%.o) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# the coding agent: the model in process, line editing as the CLI
$(BIN_DIR)/ds4-agent: $(AGENT_SRCS:%.c=$(BUILD)/%.o) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS) -ledit

# HF checkpoint -> GGUF (docs/CHECKPOINT.md)
$(BIN_DIR)/ds4-quantize: $(BUILD)/tools/ds4_quantize.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BIN_DIR)/ds4-synth: $(BUILD)/tools/ds4_synth.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BIN_DIR)/ds4-bench: $(BUILD)/tools/ds4_bench.o $(BUILD)/tools/probe.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BIN_DIR)/ds4-kv: $(BUILD)/tools/ds4_kv.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

EVAL_OBJS := $(BUILD)/tools/eval/grade.o $(BUILD)/tools/eval/questions.o
$(BIN_DIR)/ds4-eval: $(BUILD)/tools/ds4_eval.o $(EVAL_OBJS) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BIN_DIR)/ds4-steer: $(BUILD)/tools/ds4_steer.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# the graders' test links them (before the library, which they use)
$(BUILD)/tests/test_eval: $(BUILD)/tests/test_eval.o $(EVAL_OBJS) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BIN_DIR)/ds4-gguf: $(BUILD)/tools/ds4_gguf.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# model downloads (README "The model file")
$(BIN_DIR)/ds4-get: $(BUILD)/tools/ds4_get.o $(BUILD)/tools/get_fetch.o $(BUILD)/tools/get_catalog.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS) -lcurl

tests: $(TEST_BINS)

# test_oom fails chosen allocations: every malloc/calloc/realloc of the
# library and the test goes through its wrappers
$(BUILD)/tests/test_oom: LDFLAGS += -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# test_probe checks the benchmarks' machine probes (tools/probe.c)
$(BUILD)/tests/test_probe: $(BUILD)/tools/probe.o

# In a DEBUG=1 make, `test` is the sanitizer suite alone; otherwise both
# trees are built and tests/run.sh runs the optimized and the sanitizer
# suites in one pool (several tests at a time, the longest first).
ifeq ($(DEBUG),1)
test: test-suite
else
test: all
	$(MAKE) --no-print-directory DEBUG=1 all
	DS4_TEST_PASSES="opt debug" DS4_BIN_DIR=$(BIN_DIR) DS4_BUILD_DIR=$(BUILD) \
	  DS4_DEBUG_BIN_DIR=$(DEBUG_BUILD)/bin DS4_DEBUG_BUILD_DIR=$(DEBUG_BUILD) tests/run.sh
endif

test-opt: test-suite

test-suite: all
	DS4_BIN_DIR=$(BIN_DIR) DS4_BUILD_DIR=$(BUILD) DS4_DEBUG_BUILD=$(if $(filter 1,$(DEBUG)),1,0) tests/run.sh

# the official API vectors against the real model (skips without it)
test-real: $(BIN_DIR)/ds4
	tests/real/official.sh

bench: all
	bench/run.sh

# kernel throughput vs STREAM and int8/fp32 peaks; BENCH_ARGS="--csv" etc.
bench-kernels: $(BUILD)/bench/bench_kernels
	$(BUILD)/bench/bench_kernels $(BENCH_ARGS)

# glm5-next's KDA recurrence at the GLM 5.3 Flash shape: old loop, recurrent
# and chunked forms (bench/bench_kda.c); BENCH_KDA_ARGS="512 2048 -r 5 -t 2"
bench-kda: $(BUILD)/bench/bench_kda
	$(BUILD)/bench/bench_kda $(BENCH_KDA_ARGS)

# attention score/value kernels at the Flash shape vs the fp32 FMA peak
bench-attn: $(BUILD)/bench/bench_attn
	$(BUILD)/bench/bench_attn $(BENCH_ATTN_ARGS)

# ds4 against llama.cpp's own DeepSeek V4 (npm node-llama-cpp@3.22.1), whole
# model and servers, same file, alternating rounds (bench/llamacpp.sh)
bench-llamacpp: $(BIN_DIR)/ds4 $(BIN_DIR)/ds4-bench $(BIN_DIR)/ds4-synth $(BIN_DIR)/ds4-server
	bench/llamacpp.sh

# the same for glm-dsa: ds4-bench and llama.cpp on one glm52-shaped file (bench/glm.sh)
bench-glm: $(BIN_DIR)/ds4-bench $(BIN_DIR)/ds4-synth
	bench/glm.sh

# this tree's ds4-bench against revision AB_REV's, alternating (bench/ab.sh)
bench-ab: $(BIN_DIR)/ds4-bench $(BIN_DIR)/ds4-synth
	bench/ab.sh $(AB_REV)

bench-tokenizer: $(BUILD)/bench/bench_tokenizer
	$(BUILD)/bench/bench_tokenizer $(BENCH_TOK_ARGS)

# ds4 against ggml, one-token matvecs at the Flash shapes (bench/bench_ggml.c).
# GGML_DIR: a ggml checkout built with cmake into GGML_DIR/build (static
# libraries, GGML_NATIVE=ON); never part of `all` or the tests.
GGML_LIBS = -L$(GGML_DIR)/build/src -L$(GGML_DIR)/build/src/ggml-cpu -lggml-cpu -lggml-base -lstdc++ -fopenmp
# BENCH_GGML_THREADS: threads of both engines.  ggml's OpenMP workers must
# wait passively: spinning, they take the cores from ds4's pool between
# ggml's runs (Zen 1 VM, ds4 Q8_0 at 2 threads: 21.9 GB/s passive, ~17.8
# with the default policy, 11.8 with OMP_WAIT_POLICY=active).
BENCH_GGML_THREADS = 1
BENCH_GGML_SHAPES = "iq2_xxs 4096 2048" "iq2_xxs 2048 4096" "q2_k 4096 2048" "q2_k 2048 4096" \
                    "q4_k 4096 2048" "q4_k 2048 4096" "q8_0 4096 2048" "q8_0 2048 4096" \
                    "q8_0 1024 32768" "q8_0 4096 16384" "mxfp4 4096 2048" "mxfp4 2048 4096" \
                    "f16 4096 2048" "f16 4096 512"
.PHONY: bench-ggml
bench-ggml: $(LIB)
	@test -n "$(GGML_DIR)" -a -f "$(GGML_DIR)/build/src/libggml-base.a" || \
	    { echo "bench-ggml: set GGML_DIR to a ggml tree built with cmake into GGML_DIR/build"; exit 2; }
	$(CC) $(CFLAGS) -c -o $(BUILD)/bench/bench_ggml_ds4.o bench/bench_ggml_ds4.c
	$(CC) $(CFLAGS) -Wno-unused-parameter -I$(GGML_DIR)/include -o $(BUILD)/bench/bench_ggml bench/bench_ggml.c \
	    $(BUILD)/bench/bench_ggml_ds4.o $(LIB) $(GGML_LIBS) $(LIBS)
	@for r in 1 2; do for s in $(BENCH_GGML_SHAPES); do \
	    OMP_WAIT_POLICY=passive $(BUILD)/bench/bench_ggml $$s 7 $(BENCH_GGML_THREADS) 2>/dev/null; done; done

$(BUILD)/bench/bench_tokenizer: $(BUILD)/bench/bench_tokenizer.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/bench/bench_kernels: $(BUILD)/bench/bench_kernels.o $(BUILD)/tools/probe.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/bench/bench_kda: $(BUILD)/bench/bench_kda.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/bench/bench_attn: $(BUILD)/bench/bench_attn.o $(BUILD)/tools/probe.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# the main job: chat with ./ds4flash.gguf, or with a generated demo model
run: $(BIN_DIR)/ds4 $(BIN_DIR)/ds4-synth
	tools/run_main.sh

# libFuzzer targets (clang); FUZZ_SECONDS per target (default 60)
fuzz:
	fuzz/run.sh

install: $(BIN_PATHS)
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(BIN_PATHS) $(DESTDIR)$(PREFIX)/bin/
	install -d $(DESTDIR)$(PREFIX)/share/ds4/vocab
	install -m 644 vocab/deepseek-v4-vocab.gguf $(DESTDIR)$(PREFIX)/share/ds4/vocab/

clean:
	rm -rf $(BUILD) build-ubsan $(addprefix $(BIN_DIR)/,ds4 ds4-server ds4-agent ds4-synth ds4-bench ds4-kv ds4-quantize ds4-eval ds4-steer ds4-gguf ds4-get) demo/*.gguf

# keep the objects of tests and benches (intermediate files of a chain)
.SECONDARY:

# (the optimized tree's search skips the debug tree nested in it)
-include $(shell find $(BUILD) -path $(BUILD)/debug -prune -o -name '*.d' -print 2>/dev/null)

# ds4-server under clang's UBSan, float-cast-overflow included (a double
# out of an int's range is undefined), built in its own directory, then the
# server tests against it: tests/t_server.sh fails on any "runtime error:"
# in the server's log.  (The DEBUG=1 suite of `make test` runs the same
# checks with GCC's sanitizers.)
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
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)
endif
