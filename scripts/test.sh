#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs every test: the GoogleTest unit tests
# of the release build, the same unit tests under ASan+UBSan, the thread
# stress test under ThreadSanitizer, the libFuzzer targets (30 s each, one per core at once; set
# LCTX_FUZZ_SECONDS to change), the Python reference tests (numpy
# forward, gguf dequantizer, llama.cpp), and lctx serve with the openai client.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# Each stage's heading says when it began (seconds since this script
# started), so a log shows where the time goes.
stage() { echo "== $1 [at ${SECONDS} s]"; }
bash scripts/setup.sh

jobs="$(nproc)"
source "$root/scripts/sanitizer-build-flags.sh"   # san_build_flags
stage "unit tests (release)"
ctest --test-dir build/release --output-on-failure -j"$jobs"

stage "unit tests (ASan + UBSan)"
cmake -S . -B build/asan "${san_build_flags[@]}" -DLCTX_SANITIZE=ON -DLCTX_BUILD_TESTS=ON -DLCTX_CUDA=OFF >/dev/null
cmake --build build/asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build/asan --output-on-failure -j"$jobs" -E "CudaMethodsEmulated"

stage "thread stress test (ThreadSanitizer)"
cmake -S . -B build/tsan "${san_build_flags[@]}" -DLCTX_TSAN=ON -DLCTX_BUILD_TESTS=ON -DLCTX_CUDA=OFF \
    -DLCTX_BUILD_TOOLS=OFF >/dev/null
cmake --build build/tsan --target test_stress_threads -j"$jobs"
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" build/tsan/tests/test_stress_threads

stage "fuzzers (libFuzzer, ASan + UBSan)"
bash scripts/fuzz.sh "${LCTX_FUZZ_SECONDS:-30}"

stage "reference tests (pytest)"
LCTX_BUILD_DIR="$root/build/release" LCTX_MODELS_DIR="$root/models" \
    .venv/bin/python -m pytest -q --durations=8 tests/reference

stage "server tests (lctx serve, openai client)"
LCTX_BUILD_DIR="$root/build/release" LCTX_MODELS_DIR="$root/models" \
    .venv/bin/python -m pytest -q --durations=5 tests/server

stage "bindings, examples, packages, ABI guard"
bash scripts/test-bindings.sh
echo "== all tests passed in ${SECONDS} s"
