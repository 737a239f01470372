# Makefile - builds libkiln_rt, libkiln, bin/kiln, tests, benchmarks and examples.
#   make help     lists the targets
#   make run      the main job (README)     make test    run the whole test suite
#   make SAN=1 test   the same suite under ASan + UBSan (objects under build/san)
#   make setup    install the Debian packages kiln needs (as root), else print the command

# The LLVM and Lua flags below are computed when make reads this file. On a fresh machine the
# packages are not there yet, so the first pass only installs them (tools/setup.sh) and then
# runs the same goals again in a new make that sees the installed packages.
NO_DEPS_GOALS := help setup clean
ifeq ($(filter-out $(NO_DEPS_GOALS),$(or $(MAKECMDGOALS),all)),)
DEPS_READY := yes
else
DEPS_READY := $(shell tools/setup.sh --check >/dev/null 2>&1 && echo yes)
endif
ifneq ($(DEPS_READY),yes)
REMAKE_GOALS := $(or $(MAKECMDGOALS),all)
.PHONY: $(REMAKE_GOALS) deps-then-remake
$(REMAKE_GOALS): deps-then-remake ; @:
deps-then-remake:
	@tools/setup.sh
	@$(MAKE) --no-print-directory $(MAKECMDGOALS)
else

CC          ?= cc
LLVM_CONFIG ?= llvm-config-19
PREFIX      ?= /usr/local
CUDA_HOME   ?= /usr/local/cuda

ifdef SAN
O        := build/san
LIBDIR   := build/san/lib
BINDIR   := build/san/bin
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
else
O        := build
LIBDIR   := lib
BINDIR   := bin
SANFLAGS :=
endif

WERROR   := $(if $(CI),-Werror,)
CFLAGS   ?= -O2 -g
CFLAGS   += -std=c11 -D_GNU_SOURCE -Wall -Wextra $(WERROR) -fPIC $(SANFLAGS) -Iinclude -MMD -MP
LDFLAGS  += $(SANFLAGS)
CXX      ?= c++
CXXFLAGS ?= -O2 -g
CXXFLAGS += -Wall -Wextra $(WERROR) -fPIC $(SANFLAGS) -Iinclude -MMD -MP

LLVM_CFLAGS := $(shell $(LLVM_CONFIG) --cflags 2>/dev/null | sed 's/-std=[^ ]*//; s/-W[^ ]*//g; s/-D_GNU_SOURCE//')
LLVM_CXXFLAGS := $(shell $(LLVM_CONFIG) --cxxflags 2>/dev/null | sed 's/-W[^ ]*//g; s/-I/-isystem /g')
LLVM_LIBS   := $(shell $(LLVM_CONFIG) --ldflags 2>/dev/null) $(shell $(LLVM_CONFIG) --libs 2>/dev/null)
LUA_CFLAGS  := $(shell pkg-config --cflags lua5.4 2>/dev/null)
LUA_LIBS    := $(shell pkg-config --libs lua5.4 2>/dev/null)

RT_SRCS   := $(wildcard runtime/*.c)
GEN_SRCS  := $(wildcard gen/*.c) $(wildcard emu/*.c)
CLI_SRCS  := $(wildcard tools/kiln*.c) $(wildcard tools/cmd_*.c)
TEMPLATES := $(sort $(wildcard templates/*.lua templates/lib/*.lua))
TEST_SRCS := $(wildcard tests/*_test.c)
BENCH_SRCS:= $(wildcard bench/*_bench.c)

RT_OBJS   := $(RT_SRCS:%.c=$(O)/%.o)
GEN_OBJS  := $(GEN_SRCS:%.c=$(O)/%.o) $(O)/gen/templates_embed.o $(patsubst %.cpp,$(O)/%.o,$(wildcard gen/*.cpp))
CLI_OBJS  := $(CLI_SRCS:%.c=$(O)/%.o)
TESTS     := $(TEST_SRCS:tests/%.c=$(O)/tests/%)
BENCHES   := $(BENCH_SRCS:bench/%.c=$(O)/bench/%)

RT_LIBS   := -ldl -lpthread -lm
GEN_LIBS  := $(LLVM_LIBS) $(LUA_LIBS) $(RT_LIBS) -lstdc++

KILN      := $(BINDIR)/kiln

.PHONY: all check-deps setup run test bench install clean
all: check-deps $(LIBDIR)/libkiln_rt.a $(LIBDIR)/libkiln_rt.so $(LIBDIR)/libkiln.a \
     $(LIBDIR)/libkiln.so $(KILN) $(TESTS) $(BENCHES) extra

# Installs missing Debian packages when run as root, else names the apt-get command and stops.
check-deps:
	@tools/setup.sh

setup:
	@tools/setup.sh

# Rooms add their own targets to `extra` (fake driver, examples, ...).
extra:
.PHONY: extra

# Runtime room: the fake CUDA driver the runtime tests load through KILN_CUDA_DRIVER, and the
# examples (aot_*: libkiln_rt only; jit_*: libkiln too).
FAKE_CUDA := $(O)/tests/libfakecuda.so.1
EXAMPLES  := $(patsubst examples/%.c,$(O)/examples/%,$(wildcard examples/*.c))
extra: $(FAKE_CUDA) $(EXAMPLES)
$(FAKE_CUDA): tests/fake_cuda/fake_cuda.c tests/fake_cuda/fake_cuda.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -shared -fvisibility=hidden $< -o $@ $(LDFLAGS) -lpthread
$(O)/examples/aot_%: examples/aot_%.c $(LIBDIR)/libkiln_rt.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) $(LIBDIR)/libkiln_rt.a $(RT_LIBS)
$(O)/examples/jit_%: examples/jit_%.c $(LIBDIR)/libkiln.a $(LIBDIR)/libkiln_rt.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) $(STATIC_LIBS) $(GEN_LIBS)

$(O)/runtime/%.o: runtime/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Iruntime -c $< -o $@

$(O)/gen/%.o: gen/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Igen $(LLVM_CFLAGS) $(LUA_CFLAGS) -c $< -o $@

# gen/gen_llvm.cpp: the LLVM C++ API where the C API has no way to time passes.
$(O)/gen/%.o: gen/%.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -Igen $(LLVM_CXXFLAGS) $(LUA_CFLAGS) -c $< -o $@

$(O)/emu/%.o: emu/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Igen -Iemu $(LLVM_CFLAGS) $(LUA_CFLAGS) -c $< -o $@

$(O)/tools/%.o: tools/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itools -c $< -o $@

# Templates are compiled into libkiln so that it works without an installed tree.
$(O)/tools/embed: tools/embed.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O1 $(LUA_CFLAGS) $< -o $@ $(LUA_LIBS)
$(O)/gen/templates_embed.c: $(TEMPLATES) $(O)/tools/embed
	@mkdir -p $(dir $@)
	$(O)/tools/embed $@ $(TEMPLATES)
$(O)/gen/templates_embed.o: $(O)/gen/templates_embed.c
	$(CC) $(CFLAGS) -c $< -o $@

$(LIBDIR)/libkiln_rt.a: $(RT_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(LIBDIR)/libkiln_rt.so: $(RT_OBJS)
	@mkdir -p $(dir $@)
	$(CC) -shared $(LDFLAGS) -o $@ $^ $(RT_LIBS)
$(LIBDIR)/libkiln.a: $(GEN_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(LIBDIR)/libkiln.so: $(GEN_OBJS) $(LIBDIR)/libkiln_rt.so
	$(CC) -shared $(LDFLAGS) -o $@ $(GEN_OBJS) -L$(LIBDIR) -lkiln_rt $(GEN_LIBS) -Wl,-rpath,'$$ORIGIN'

STATIC_LIBS := $(LIBDIR)/libkiln.a $(LIBDIR)/libkiln_rt.a

$(KILN): $(CLI_OBJS) $(STATIC_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(CLI_OBJS) $(STATIC_LIBS) $(GEN_LIBS)

$(O)/tests/%: tests/%.c $(STATIC_LIBS) tests/check.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -Igen -Iemu -Iruntime $(LLVM_CFLAGS) $(LUA_CFLAGS) $< -o $@ \
	    $(LDFLAGS) $(STATIC_LIBS) $(GEN_LIBS)

$(O)/bench/%: bench/%.c $(STATIC_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Ibench $< -o $@ $(LDFLAGS) $(STATIC_LIBS) $(GEN_LIBS)

# The main job: generate LayerNorm PTX for every SM and show that ptxas accepts it.
run: all
	@tools/showcase.sh $(KILN)

test: all
	@KILN=$(KILN) O=$(O) tests/run.sh

bench: all
	@for b in $(BENCHES); do echo "== $$b"; $$b || exit 1; done

# JIT at model load (docs/jit.md): stage split per variant, the transformer kernel set cold on
# every core, and `kiln emit` as a process against NVRTC and Triton processes. Not in `make test`.
$(O)/bench/nvrtc_once: bench/nvrtc_once.c bench/layernorm_cuda.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) -ldl
bench-jit: all $(O)/bench/nvrtc_once
	$(O)/bench/jit_bench warm
	$(O)/bench/jit_bench model bench/transformer_kernels.txt
	python3 bench/jit_compare.py --kiln $(KILN) --nvrtc $(O)/bench/nvrtc_once
.PHONY: bench-jit

# Rewrites tests/quality/<test>.tsv: per variant of every ptxas matrix test (those using
# tests/matrix.h), the registers and instruction counts LLVM's default<O3> pipeline gives.
# Run it after a template changes or new variants land; the matrix tests then check kiln's
# pipeline against it.
QUALITY_TESTS = $(patsubst tests/%.c,$(O)/tests/%,$(shell grep -l '"matrix.h"' tests/*_test.c))
quality-table: all
	@mkdir -p tests/quality
	@for t in $(QUALITY_TESTS); do echo "== $$t (default<O3>)"; \
	    KILN_PIPELINE=o3 KILN_QUALITY_WRITE=1 $$t | grep -E '^(wrote|FAIL|.*: [0-9]+ passed)' || exit 1; done
.PHONY: quality-table

install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/include/kiln
	install -m 644 $(LIBDIR)/libkiln_rt.a $(LIBDIR)/libkiln.a $(DESTDIR)$(PREFIX)/lib
	install -m 755 $(LIBDIR)/libkiln_rt.so $(LIBDIR)/libkiln.so $(DESTDIR)$(PREFIX)/lib
	install -m 755 $(KILN) $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/kiln/*.h $(DESTDIR)$(PREFIX)/include/kiln

clean:
	rm -rf build lib bin

-include $(shell find build -name '*.d' 2>/dev/null)
endif
