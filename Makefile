# rebuno build. GNU make + pkg-config; everything lands in build/.
#   make            release binary build/rebuno
#   make asan       ASan+UBSan binary build/asan/rebuno (what the tests run)
#   make unit       Criterion unit tests (ASan+UBSan)
#   make test       the whole suite: scripts/test.sh without the apt step
#   make bench      benchmarks (bench/)
#   make lint       cppcheck over src/
#   make fmt        clang-format in place
PKGS     := libevent libevent_pthreads jansson yaml-0.1 sqlite3 libpq openssl libcurl libseccomp libcap libarchive zlib
CC       ?= cc
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS))
PKG_LIBS   := $(shell pkg-config --libs $(PKGS)) -lhttp_parser -lwslay -lm -lpthread

WARN     := -Wall -Wextra -Werror -Wshadow -Wformat=2 -Wno-unused-parameter \
            -Wstrict-prototypes -Wmissing-prototypes -Wvla
HARDEN   := -D_FORTIFY_SOURCE=2 -fstack-protector-strong -fPIE
CFLAGS_COMMON := -std=gnu11 $(WARN) -Isrc $(PKG_CFLAGS) -MMD -MP -D_GNU_SOURCE
RELEASE_CFLAGS := $(CFLAGS_COMMON) -O2 -g $(HARDEN)
ASAN_CFLAGS := $(CFLAGS_COMMON) -O1 -g -fno-omit-frame-pointer \
               -fsanitize=address,undefined -fno-sanitize-recover=undefined
LDHARDEN := -pie -Wl,-z,relro,-z,now

SRC      := $(sort $(wildcard src/*/*.c src/*/*/*.c))
LIB_SRC  := $(filter-out src/cli/main.c,$(SRC))
UNIT_SRC := $(sort $(wildcard tests/unit/*.c))
BENCH_SRC := $(sort $(wildcard bench/*.c))

# the dashboard (ui/): bundled with esbuild when node and npm are here, embedded as a C file
UI_GEN   := build/gen/ui_assets.c
UI_INPUT := $(sort $(wildcard ui/src/*)) ui/build.mjs ui/package-lock.json
HAVE_NODE := $(shell command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 && echo yes)

REL_OBJ  := $(SRC:%.c=build/rel/%.o) build/rel/$(UI_GEN:.c=.o)
ASAN_OBJ := $(SRC:%.c=build/asan/%.o) build/asan/$(UI_GEN:.c=.o)
ASAN_LIB_OBJ := $(LIB_SRC:%.c=build/asan/%.o) build/asan/$(UI_GEN:.c=.o)
REL_LIB_OBJ := $(LIB_SRC:%.c=build/rel/%.o) build/rel/$(UI_GEN:.c=.o)
UNIT_OBJ := $(UNIT_SRC:%.c=build/asan/%.o)

FUZZ_SRC := $(sort $(wildcard tests/fuzz/*.c))
FUZZ_LIB_SRC := src/base/buf.c src/base/err.c src/base/xalloc.c src/base/jtext.c src/kernel/identity.c \
                src/sandbox/storage/oci.c src/sandbox/storage/registry.c src/base/clock.c \
                src/proxy/policy.c $(wildcard src/policy/*.c)

.PHONY: all asan unit test bench lint fmt clean fuzz demo ui
all: build/rebuno

ui: $(UI_GEN)
ifeq ($(HAVE_NODE),yes)
ui/node_modules/.package-lock.json: ui/package-lock.json ui/package.json
	cd ui && PUPPETEER_SKIP_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error
	@touch $@

build/ui/index.html: $(UI_INPUT) ui/node_modules/.package-lock.json
	cd ui && node build.mjs ../build/ui
else
build/ui/index.html:
	@echo "node/npm not found: building rebuno without the dashboard (see docs/dashboard.md)"
endif

$(UI_GEN): build/ui/index.html scripts/embed_ui.py
	@mkdir -p $(dir $@)
	python3 scripts/embed_ui.py build/ui $@

build/rebuno: $(REL_OBJ)
	$(CC) $(LDHARDEN) -o $@ $^ $(PKG_LIBS)

asan: build/asan/rebuno
build/asan/rebuno: $(ASAN_OBJ)
	$(CC) -fsanitize=address,undefined -o $@ $^ $(PKG_LIBS)

build/rel/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(RELEASE_CFLAGS) -c -o $@ $<

build/asan/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ASAN_CFLAGS) -c -o $@ $<

build/asan/unit_tests: $(UNIT_OBJ) $(ASAN_LIB_OBJ)
	$(CC) -fsanitize=address,undefined -o $@ $^ $(PKG_LIBS) -lcriterion

unit: build/asan/unit_tests
	build/asan/unit_tests

build/bench/%: bench/%.c $(REL_LIB_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(RELEASE_CFLAGS) $(LDHARDEN) -o $@ $^ $(PKG_LIBS)

bench: build/rebuno $(BENCH_SRC:bench/%.c=build/bench/%)
	bash bench/run.sh

# the coding-agent demo (as root: it runs sandboxes); see examples/coding-agent/README.md
demo: build/rebuno
	python3 examples/coding-agent/demo.py

test: build/rebuno build/asan/rebuno build/asan/unit_tests
	bash scripts/test.sh --no-install

# libFuzzer targets (clang): build/fuzz/<name>; run e.g. build/fuzz/fuzz_policy -max_total_time=60
build/fuzz/%: tests/fuzz/%.c $(FUZZ_LIB_SRC)
	@mkdir -p $(dir $@)
	clang -std=gnu11 -g -O1 -Isrc -D_GNU_SOURCE $(PKG_CFLAGS) -fsanitize=fuzzer,address,undefined \
	  -o $@ $^ $(PKG_LIBS)

fuzz: $(FUZZ_SRC:tests/fuzz/%.c=build/fuzz/%)
	for f in $^; do $$f -max_total_time=$${FUZZ_SECONDS:-30} -rss_limit_mb=2048 || exit 1; done

lint:
	cppcheck --quiet --error-exitcode=1 --enable=warning,portability -Isrc --std=c11 \
	  --suppress=missingIncludeSystem src/

fmt:
	clang-format -i $(SRC) $(wildcard src/*/*.h src/*/*/*.h) $(UNIT_SRC) $(BENCH_SRC)

clean:
	rm -rf build

-include $(REL_OBJ:.o=.d) $(ASAN_OBJ:.o=.d) $(UNIT_OBJ:.o=.d)
