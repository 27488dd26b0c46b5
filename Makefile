# Surge's entry points. `make demo` is the main job, `make test` the whole test suite
# (both are what README.md and .ci/run call).
CARGO ?= cargo

.PHONY: demo test build venv test-rust test-python bench

build:
	$(CARGO) build --release --workspace

venv:
	./scripts/venv.sh

demo: build
	./target/release/surge demo

test-rust: build
	$(CARGO) test --release --workspace

test-python: venv build
	.venv/bin/python -m pytest -q python/tests

test: test-rust test-python

bench: build
	./bench/run-all.sh
