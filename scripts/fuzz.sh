#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (clang, ASan + UBSan, build/fuzz) and
# runs each for SECONDS (default 60) on one core, as many at once as there
# are cores (LCTX_FUZZ_JOBS to change), starting from the committed
# seeds in fuzz/corpus/<target>/ (new inputs go to build/fuzz/corpus/, not
# into the repository). Prints executions, coverage and features per target;
# exits non-zero when any target finds a crash, a leak, a timeout or runs out
# of memory (the reproducer is left in build/fuzz/artifacts/).
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
seconds="${1:-60}"
shift || true
targets=("$@")
((${#targets[@]})) || targets=(fuzz_gguf fuzz_tokenizer fuzz_chat_template fuzz_head_profile fuzz_index fuzz_api)

# clang and its runtimes (libFuzzer, ASan, UBSan) from Debian.
need_apt=()
command -v clang++ >/dev/null 2>&1 || need_apt+=(clang)
compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null || need_apt+=(libclang-rt-dev)
if ((${#need_apt[@]})); then
    echo "fuzz: installing ${need_apt[*]} (apt)"
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

source "$(dirname "${BASH_SOURCE[0]}")/sanitizer-build-flags.sh"
CC=clang CXX=clang++ cmake -S . -B build/fuzz "${san_build_flags[@]}" -DLCTX_FUZZ=ON -DLCTX_CUDA=OFF \
    -DLCTX_BUILD_TESTS=OFF -DLCTX_BUILD_TOOLS=OFF >/dev/null
cmake --build build/fuzz --target fuzz_all -j"$(nproc)"

# Per-target input size limits: a GGUF seed is ~30 KB, the rest are small.
max_len() {
    case "$1" in
        fuzz_gguf) echo 65536 ;;
        fuzz_index) echo 16384 ;;
        *) echo 4096 ;;
    esac
}

mkdir -p build/fuzz/corpus build/fuzz/artifacts build/fuzz/logs
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# One target: its libFuzzer run, then its summary line in logs/<target>.result.
run_target() {
    local t="$1" seeds="fuzz/corpus/${1#fuzz_}" work="build/fuzz/corpus/${1#fuzz_}" log="build/fuzz/logs/$1.log"
    local rc=0 execs cov
    mkdir -p "$work"
    "build/fuzz/fuzz/$t" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 -malloc_limit_mb=4096 \
        -max_len="$(max_len "$t")" -print_final_stats=1 -artifact_prefix="build/fuzz/artifacts/$t-" \
        "$work" "$seeds" >"$log" 2>&1 || rc=$?
    execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo "?")
    cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 || true)
    echo "$rc $t: rc=$rc executions=$execs ${cov:-cov: ?} corpus=$(ls "$work" | wc -l)" >"build/fuzz/logs/$t.result"
}
jobs="${LCTX_FUZZ_JOBS:-$(nproc)}"
running=0
for t in "${targets[@]}"; do
    if ((running >= jobs)); then
        wait -n || true
        running=$((running - 1))
    fi
    echo "== $t: ${seconds}s (seeds fuzz/corpus/${t#fuzz_})"
    rm -f "build/fuzz/logs/$t.result"
    run_target "$t" &
    running=$((running + 1))
done
wait
failed=()
summary=()
for t in "${targets[@]}"; do
    result="$(cat "build/fuzz/logs/$t.result" 2>/dev/null || echo "1 $t: no result (the run did not finish)")"
    line="${result#* }"
    summary+=("$line")
    if [[ "${result%% *}" != 0 ]]; then
        failed+=("$t")
        echo "$line"
        tail -40 "build/fuzz/logs/$t.log"
    fi
done
echo "== fuzz summary (${seconds}s per target, $jobs at once)"
printf '%s\n' "${summary[@]}"
if ((${#failed[@]})); then
    echo "fuzz: FAILED: ${failed[*]} (reproducers in build/fuzz/artifacts/)"
    exit 1
fi
echo "fuzz: ${#targets[@]} targets, no crash"
