#!/usr/bin/env bash
# --backend of lctx bench, run and eval on the tiny stories260K model: the
# output names the backend that actually ran, so a fallback to the CPU is
# visible (never "cuda" when the CPU ran), with one stderr line saying why:
#  - cuda, the module built but no device here: the line names the module
#    file beside the build (found by the binary) and "no device or driver";
#    on a machine with a device the module runs and the JSON says "cuda";
#  - cuda, no module built, or an unknown name: "no module provides it";
#  - cpu: no backend line.
# usage: test_cli_backend.sh LCTX MODEL.gguf [CUDA_MODULE]   (no CUDA_MODULE: built without it)
set -uo pipefail
LCTX=$1
MODEL=$2
MODULE=${3:-}
[ -f "$MODEL" ] || { echo "FAIL: test model $MODEL not found"; exit 1; }
[ -n "$MODULE" ] && MODULE=$(realpath "$MODULE")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
failures=0 passed=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { passed=$((passed + 1)); }
unset LCTX_BACKEND LCTX_BACKEND_PATH

BENCH=(bench -m "$MODEL" -p 32 --decode-ctx 32 -n 4 -r 1 --reform 256 -t 1)
# the stderr line of a requested backend that cannot run here
fallback_line() {   # NAME
    if [ "$1" = cuda ] && [ -n "$MODULE" ]; then
        echo "backend 'cuda' is not available on this machine (module $MODULE: cannot run on this machine (no device or driver)); using the CPU"
    else
        echo "backend '$1' is not available on this machine (no module provides it; found: cpu"
    fi
}

# check_bench NAME: after "$LCTX" ${BENCH[@]} --backend NAME (or LCTX_BACKEND=NAME)
check_bench() {
    local name=$1 ran
    ran=$(sed -n 's/^  "backend": "\(.*\)",$/\1/p' "$T/out")
    grep -q "^  \"backend_requested\": \"$name\",$" "$T/out" || fail "$name: no backend_requested \"$name\": $(head -c 300 "$T/out")"
    if [ "$name" = cuda ] && [ -n "$MODULE" ] && [ "$ran" = cuda ]; then
        # a device is present: the module ran, and nothing fell back
        grep -q "is not available" "$T/err" && fail "cuda ran but stderr has a fallback line: $(cat "$T/err")"
        ok; return
    fi
    [ "$ran" = cpu ] || fail "$name: the JSON says backend '$ran', the CPU ran"
    grep -q '"n_doc": 256, "backend": "cpu"' "$T/out" || fail "$name: the REFORM entry does not say cpu: $(grep n_doc "$T/out")"
    if [ "$name" = cpu ]; then
        grep -q "backend '" "$T/err" && fail "cpu: a backend line on stderr: $(cat "$T/err")"
    else
        local line
        line=$(fallback_line "$name")
        grep -qF "$line" "$T/err" || fail "$name: stderr lacks the fallback line '$line': $(cat "$T/err")"
    fi
    ok
}

for name in cuda nosuch cpu; do
    if "$LCTX" "${BENCH[@]}" --backend "$name" > "$T/out" 2> "$T/err"; then check_bench "$name"
    else fail "bench --backend $name: exit non-zero: $(cat "$T/err")"; fi
done
# the environment variable, as the library reads it
if LCTX_BACKEND=cuda "$LCTX" "${BENCH[@]}" > "$T/out" 2> "$T/err"; then check_bench cuda
else fail "LCTX_BACKEND=cuda bench: exit non-zero: $(cat "$T/err")"; fi

# lctx run: the JSON and the stats line name the backend
printf 'Lily had a red ball. She played with it in the park every day.\n' > "$T/doc.txt"
if "$LCTX" run -m "$MODEL" --file "$T/doc.txt" --question "What did Lily have?" -n 4 -t 1 --no-chat --json \
        --backend cuda > "$T/out" 2> "$T/err"; then
    if grep -q '"backend": "cuda"' "$T/out" && ! grep -q "is not available" "$T/err"; then ok   # a device here
    elif grep -q '"backend": "cpu"' "$T/out" && grep -qF "$(fallback_line cuda)" "$T/err"; then ok
    else fail "run --backend cuda --json: $(cat "$T/out") / $(cat "$T/err")"; fi
else fail "run --backend cuda: exit non-zero: $(cat "$T/err")"; fi
if "$LCTX" run -m "$MODEL" --file "$T/doc.txt" --question "What did Lily have?" -n 4 -t 1 --no-chat \
        --backend nosuch > "$T/out" 2> "$T/err"; then
    grep -q "^reform on cpu: " "$T/err" && grep -qF "$(fallback_line nosuch)" "$T/err" && ok ||
        fail "run --backend nosuch: stderr: $(cat "$T/err")"
else fail "run --backend nosuch: exit non-zero: $(cat "$T/err")"; fi

# lctx eval: each row records the backend that ran
if "$LCTX" eval -m "$MODEL" --methods full --tasks vt --lengths 512 --samples 1 --threads 1 --backend nosuch \
        --out "$T/e.jsonl" > "$T/out" 2> "$T/err"; then
    grep -q '"backend": "cpu"' "$T/e.jsonl" && grep -q ' on cpu -> ' "$T/err" && ok ||
        fail "eval --backend nosuch: $(cat "$T/e.jsonl") / $(cat "$T/err")"
else fail "eval --backend nosuch: exit non-zero: $(cat "$T/err")"; fi

# bench/run.py --backend cuda: its report says cuda fell back (quoting the
# line) instead of showing the CPU's figures as cuda's; on a device, a table.
RUN_PY="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/bench/run.py"
if command -v python3 >/dev/null; then
    if python3 "$RUN_PY" --lctx "$LCTX" -m "$MODEL" -t 1 -p 32 --decode-ctx 32 -n 4 -r 1 --reform 256 --no-llama \
            --no-profile --backend cuda -o "$T/bench.md" > /dev/null 2> "$T/err"; then
        if grep -q '^| prefill 32 tokens (tok/s) | [0-9.]* | [0-9.]* | \*\*[0-9.]*x\*\* |$' "$T/bench.md" &&
                ! grep -q "cuda was unavailable" "$T/bench.md"; then ok   # a device here
        elif grep -qF '**cuda was unavailable: `lctx bench --backend cuda` fell back to the CPU**' "$T/bench.md" &&
                grep -qF "    lctx: $(fallback_line cuda)" "$T/bench.md" && ! grep -q "| cuda (median)" "$T/bench.md"; then ok
        else fail "bench/run.py --backend cuda: the report does not say which backend ran: $(grep -A5 'backend cuda' "$T/bench.md")"; fi
    else fail "bench/run.py --backend cuda: exit non-zero: $(tail -5 "$T/err")"; fi
fi

echo "$passed passed, $failures failed"
[ $failures -eq 0 ]
