#!/usr/bin/env bash
# Builds and tests the language bindings against build/release (or
# $LCTX_BUILD_DIR): Python and Java (SWIG), Go (cgo), Rust (bindgen; when cargo
# is installed), the ABI guard, the packages (CPack install test, pom.xml, the
# Python wheel) and the examples in C, Python, Java, Go and Rust. Installs
# missing Debian packages (apt-get update only then; valgrind for the Python
# leak check).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="${LCTX_BUILD_DIR:-$root/build/release}"
python="${PYTHON:-$root/.venv/bin/python}"
[[ -x "$python" ]] || python="$(command -v python3)"

need=()
command -v swig >/dev/null || need+=(swig)
command -v javac >/dev/null || need+=(default-jdk-headless)
[[ -f /usr/share/java/junit-platform-console-standalone.jar ]] || need+=(junit5)
command -v go >/dev/null || need+=(golang-go)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v valgrind >/dev/null || need+=(valgrind)
command -v dpkg-deb >/dev/null || need+=(dpkg)
if [[ -f bindings/rust/Cargo.toml ]]; then command -v bindgen >/dev/null || need+=(bindgen); fi
if ((${#need[@]})); then
    echo "test-bindings: installing ${need[*]} (apt)"
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
export JAVA_HOME="${JAVA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v javac)")")")}"

rust=OFF
[[ -f bindings/rust/Cargo.toml ]] && command -v cargo >/dev/null && rust=ON
echo "test-bindings: configuring $build with the bindings"
cmake -S . -B "$build" -DLCTX_BUILD_TESTS=ON -DLCTX_BINDINGS_PYTHON=ON -DLCTX_BINDINGS_JAVA=ON \
    -DLCTX_BINDINGS_GO=ON -DLCTX_BINDINGS_RUST=$rust -DPython3_EXECUTABLE="$python" >/dev/null
cmake --build "$build" -j"$(nproc)" --target lctx lctx_cli lctx_python lctx_java lctx_abi_layout

echo "== shared binding cases: the committed answers are still lctx run's"
# bindings/tests/shared_cases.json is run by the Python, Java, Go and Rust
# tests below (test_shared_cases.py, SharedCasesTest, shared_cases_test.go,
# shared_cases.rs); its answers come from the C command line, not a binding.
cases_tmp="$(mktemp)"
"$python" bindings/tests/make_shared_cases.py "$build/tools/lctx" tests/data/stories260K.gguf "$cases_tmp" 2>/dev/null
"$python" - "$cases_tmp" <<'PY'
import json, sys
new, old = (json.load(open(p, encoding="utf-8")) for p in (sys.argv[1], "bindings/tests/shared_cases.json"))
keys = ("answer_cases", "error_cases", "progress_case")
if any(new[k] != old[k] for k in keys):
    sys.exit("shared cases: lctx run now answers differently; regenerate with bindings/tests/make_shared_cases.py")
print("shared cases: up to date")
PY
rm -f "$cases_tmp"

echo "== binding tests"
# Two at a time: python_binding (about 2 minutes on 2 cores, most of it the
# single-threaded valgrind leak check) runs beside the others.
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" -R '^(python_binding|java_binding|java_jar_portable|go_binding|rust_binding|abi_guard|packaging_install)$'

echo "== packaging: pom.xml, Python wheel"
bash packaging/test_pom.sh
# Builds the wheel with scikit-build-core from PyPI (skipped when unreachable);
# its CMake build dir is kept under $build/wheel, so reruns take seconds.
# The wheel is built here to test its packaging, not its speed: at -O1 the
# core compiles about 3x faster than at the release -O3 (kernels_avx512.cpp:
# 22 -> 7 s), one CUDA architecture is enough to check the module is in
# it, and the core's layers compile as unity files (LCTX_UNITY; the whole
# test: 80 s on 2 cores, from a cold build dir). A CMAKE_ARGS of the
# caller's replaces these.
wheel_cmake_args='"-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" -DCMAKE_CUDA_ARCHITECTURES=90-real -DLCTX_UNITY=ON'
CMAKE_ARGS="${CMAKE_ARGS:-$wheel_cmake_args}" PYTHON="$python" bash packaging/test_wheel.sh "$build/wheel"

echo "== examples"
model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
[[ -f "$model" ]] || model="${LCTX_TINY_MODEL:-$root/tests/data/stories260K.gguf}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# The C example reads a document longer than the model's trained context (a
# ~10.5K-token haystack for SmolLM2's 8K) with the library's default method,
# REFORM, and answers a question about the fact hidden in it. Then all five
# examples (C again, Python, Java, Go, Rust) read a shorter haystack (120
# sentences, ~2.2K tokens) and must print the same answer: every binding
# hands the text to the same library call, so the long document would check
# nothing more there, and each run of it costs about 70 s on 2 cores (18 s
# for the short one).
question="$("$python" examples/make_haystack.py "$tmp/doc.txt")"
"$python" examples/make_haystack.py "$tmp/short.txt" 120 >/dev/null
n=24
declare -A out
cc -std=c99 -Wall -Werror examples/c/ask.c -Iinclude -L"$build" -Wl,-rpath,"$build" -llctx -o "$tmp/ask"
long_answer="$("$tmp/ask" "$model" "$tmp/doc.txt" "$question" $n)"
printf '%-7s %s\n' "c, long:" "$long_answer"
doc="$tmp/short.txt"
out[c]="$("$tmp/ask" "$model" "$doc" "$question" $n)"
out[python]="$(PYTHONPATH="$build/bindings/python" "$python" examples/python/ask.py "$model" "$doc" "$question" $n)"
out[java]="$(java -cp "$build/bindings/java/lctx.jar" examples/java/Ask.java "$model" "$doc" "$question" $n)"
out[go]="$(cd examples/go && CGO_LDFLAGS="-L$build -Wl,-rpath,$build" GOPROXY=off GOFLAGS=-mod=mod \
    go run . "$model" "$doc" "$question" $n)"
if [[ -f examples/rust/Cargo.toml && $rust == ON ]]; then
    out[rust]="$(cd examples/rust && LCTX_LIB_DIR="$build" LD_LIBRARY_PATH="$build" \
        cargo run --offline --quiet --target-dir "$build/bindings/rust-target" -- "$model" "$doc" "$question" $n)"
fi
passed=0 failed=0
for lang in "${!out[@]}"; do
    printf '%-7s %s\n' "$lang:" "${out[$lang]}"
    # Same model, same greedy decoding: every language must print the same answer.
    if [[ -n "${out[$lang]}" && "${out[$lang]}" == "${out[c]}" ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done
# SmolLM2 finds the hidden number in both documents (stories260K, the
# fallback, only has to agree).
if [[ "$model" == *SmolLM2* ]]; then
    for answer in "$long_answer" "${out[c]}"; do
        if [[ "$answer" == *7391* ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "examples: an answer misses 7391"; fi
    done
fi
echo "examples: $passed passed, $failed failed"
((failed == 0))
