# Surge's entry points. `make demo` is the main job, `make test` the whole test suite
# (both are what README.md and .ci/run call).
CARGO ?= cargo

.PHONY: demo test build venv test-rust test-python test-fuse bench lint install fuzz

build:
	$(CARGO) build --release --workspace

# Puts `surge` and what it launches (surge-server, surge-fuse, found beside it) on PATH, and
# libsurge and libdatawarp (DataWarp's C API) with their headers where C programs find them,
# and the interception library `surge run` preloads (found in ../lib from `surge`).
# `make install PREFIX=~/.local` for one user; the FUSE mount then needs /dev/fuse and
# fusermount3 (package fuse3).
# mount(8) runs `mount.fuse.surge` from /sbin for `mount -t fuse.surge` and /etc/fstab lines
# (a link to `surge`): there for a system-wide install, under PREFIX for one user's.
PREFIX ?= /usr/local
SBINDIR ?= $(if $(filter /usr/local /usr,$(PREFIX)),/sbin,$(PREFIX)/sbin)
install: build
	install -d $(PREFIX)/bin $(PREFIX)/lib $(PREFIX)/include $(SBINDIR)
	ln -sf $(abspath $(PREFIX))/bin/surge $(SBINDIR)/mount.fuse.surge
	install -m 755 target/release/surge target/release/surge-server target/release/surge-fuse \
		target/release/surge-manager target/release/surge-agent $(PREFIX)/bin/
	ln -sf surge $(PREFIX)/bin/dw_wlm_cli
	ln -sf surge $(PREFIX)/bin/dwstat
	install -m 755 target/release/libsurge.so target/release/libdatawarp.so target/release/libsurge_preload.so $(PREFIX)/lib/
	install -m 644 crates/surge-capi/include/surge.h crates/surge-datawarp/include/datawarp.h $(PREFIX)/include/

venv:
	./scripts/venv.sh

# The reference workflow (examples/in-transit): simulation + in-transit visualization + movie
# encoder, once on a throttled PFS and once through a local 4-server Surge instance with
# staging; prints seed 000's Table III for both. Needs root (the PFS stand-in is a throttled
# loop device).
demo: build venv
	.venv/bin/python examples/in-transit/run.py --out in-transit-results

# The whole suite, its parts side by side (scripts/run-tests.py: every test executable of the
# workspace and the Python tests; logs in target/test-logs/). The mounts of the suite take
# FUSE over io_uring or /dev/fuse, half each (tests/harness.rs, `fuse_transport_of`;
# .ci/run turns the fuse module's enable_uring on); `SURGE_FUSE_IO_URING=0 make test-fuse`
# runs every mount test over /dev/fuse.
# One build of every target (binaries, libraries, tests: one cargo run keeps both cores busy
# to its end), while the Python environment is made beside it.
test:
	mkdir -p target
	./scripts/venv.sh >target/venv.log 2>&1 & venv=$$!; \
	$(CARGO) build --release --workspace --all-targets; built=$$?; \
	if ! wait $$venv; then cat target/venv.log; exit 1; fi; \
	[ $$built -eq 0 ] && ./scripts/run-tests.py

test-rust: build
	./scripts/run-tests.py --only surge-

test-python: venv build
	.venv/bin/python -m pytest -q python/tests

test-fuse: build
	./scripts/run-tests.py --only surge-tests:fuse

# Formatting, clippy with every warning an error (unsafe blocks need a SAFETY comment), and the
# crate layering of docs/architecture.md. CI runs it before the tests.
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings
	python3 scripts/check-layering.py

# The data-plane, FUSE and staging benchmarks, one after another (bench/RESULTS.md records
# their results). Needs root, fio and bindfs; bench/run-all.sh checks before it starts.
bench: build
	./bench/run-all.sh

# The fuzz targets' long runs (docs/fuzzing.md records them), one after another, FUZZ_RUNS
# inputs each, at the lowest priority. Needs nightly and `cargo install cargo-fuzz`; not part of
# the CI, which replays the findings kept in fuzz/regressions/ and a short run of each target in
# `make test` (crates/surge-server/tests/fuzz_corpus.rs).
FUZZ_RUNS ?= 10000000
fuzz:
	cd fuzz && nice -n 19 cargo +nightly fuzz run frame -- -runs=$(FUZZ_RUNS) -print_final_stats=1
	cd fuzz && nice -n 19 cargo +nightly fuzz run requests -- -runs=$(FUZZ_RUNS) -print_final_stats=1
	cd fuzz && nice -n 19 cargo +nightly fuzz run directives -- -dict=directives.dict -runs=$(FUZZ_RUNS) -print_final_stats=1
	cd fuzz && nice -n 19 cargo +nightly fuzz run journal -- -runs=$(FUZZ_RUNS) -print_final_stats=1
