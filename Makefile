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
ifneq ($(wildcard tools/ds4_eval.c),)
  BINS += ds4-eval
endif
ifneq ($(wildcard tools/ds4_steer.c),)
  BINS += ds4-steer
endif

.PHONY: all test test-real bench bench-kernels bench-tokenizer install clean fuzz tests run FORCE
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

EVAL_OBJS := $(BUILD)/tools/eval/grade.o $(BUILD)/tools/eval/questions.o
ds4-eval: $(BUILD)/tools/ds4_eval.o $(EVAL_OBJS) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

ds4-steer: $(BUILD)/tools/ds4_steer.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# the graders' test links them (before the library, which they use)
$(BUILD)/tests/test_eval: $(BUILD)/tests/test_eval.o $(EVAL_OBJS) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

tests: $(TEST_BINS)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

test: all
	tests/run.sh

# the official API vectors against the real model (skips without it)
test-real: ds4
	tests/real/official.sh

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
	rm -rf $(BUILD) ds4 ds4-server ds4-synth ds4-bench ds4-kv ds4-eval ds4-steer demo/*.gguf

# keep the objects of tests and benches (intermediate files of a chain)
.SECONDARY:

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
