#!/usr/bin/env bash
# The checks only a CUDA device can run, as one script for a GPU machine that
# was sent a build from elsewhere (docs/backends/cuda.md, "Tests"):
#   1. the GPU tests (gpu.*: the backend's ops against the CPU backend, a whole
#      session, every method through the C API);
#   2. with a model: one REFORM question on cuda, `lctx bench` on cuda and on
#      the CPU of the same machine;
#   3. with a model: `lctx eval` on cuda, as many rows as the time left allows.
# Every stage has its own time limit, so one hang costs that stage only.
#
# Environment:
#   BIN       folder with lctx, test_cuda_backend_gpu and liblctx-cuda.so (required)
#   OUT       where logs and results go (required)
#   MODEL     a GGUF model (stages 2 and 3 run only with one)
#   STAGES    which stages to run (default "1 2 3")
#   EVAL_ARGS arguments of stage 3's `lctx eval` after -m and --backend (default: none, stage skipped)
#   EVAL_S    seconds for stage 3 (default 300)
#   THREADS   CPU threads (default: all cores)
#   CPU_BENCH 0 skips stage 2's bench on the host CPU (default 1)
#   STAGE2_S  seconds for each of stage 2's cuda benches (default 200)
#   PROFILE_S seconds for each of stage 2's per-op profiles (default 120)
set -u
: "${BIN:?BIN: folder of the binaries}" "${OUT:?OUT: output folder}"
STAGES=${STAGES:-"1 2 3"}
THREADS=${THREADS:-$(nproc)}
export LCTX_BACKEND_PATH="$BIN/liblctx-cuda.so" LCTX_TEST_CUDA_MODULE="$BIN/liblctx-cuda.so"
# cuBLAS: the toolkit's, else the one a Python CUDA wheel installed
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         "$(python3 -c 'import nvidia.cublas, os; print(os.path.dirname(nvidia.cublas.__file__) + "/lib")' 2>/dev/null)"; do
    [ -e "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" && break
done
[ -d "$BIN/lib" ] && export LD_LIBRARY_PATH="$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
stage() { case " $STAGES " in *" $1 "*) return 0 ;; esac; return 1; }
say() { echo "== $(date -u +%T) $*"; }

say "device"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1
nproc; grep -m1 "model name" /proc/cpuinfo

if stage 1; then
    say "stage 1: GPU tests"
    timeout 300 "$BIN/test_cuda_backend_gpu" 2>&1 | tee "$OUT/gpu-tests.log" | grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|rel|Expected|Which is|actual|error" | head -80
fi

[ -n "${MODEL:-}" ] || { say "no MODEL: stages 2 and 3 skipped"; exit 0; }

if stage 2; then
    say "stage 2: one REFORM question on cuda"
    doc=$(mktemp)
    python3 - "$doc" <<'EOF'
import random, sys
random.seed(7)
words = "the of a river stone light garden winter paper north city song".split()
parts = [" ".join(random.choice(words) for _ in range(40)) + "." for _ in range(700)]
parts.insert(400, "The secret code of the blue door is 48213.")
open(sys.argv[1], "w").write("\n".join(parts))
EOF
    timeout 60 "$BIN/lctx" run -m "$MODEL" --backend cuda -t "$THREADS" --method reform --file "$doc" \
        --question "What is the secret code of the blue door?" -n 24 2>&1 | tail -6
    # Where the time goes on the device, per op (docs/profiling.md): ReAttention
    # (host-bound on cuda: 62-73 s a 32K eval row against FULL's 5 s) and FULL's decode.
    for meth in reattention full; do
        say "stage 2: $meth on cuda, per-op times"
        timeout "${PROFILE_S:-120}" "$BIN/lctx" run -m "$MODEL" --backend cuda -t "$THREADS" --method "$meth" \
            --file "$doc" --question "What is the secret code of the blue door?" -n 64 --profile-ops \
            > /dev/null 2> "$OUT/profile-$meth-cuda.txt"
        echo "rc $?"; tail -30 "$OUT/profile-$meth-cuda.txt"
    done
    say "stage 2: lctx bench on cuda"
    timeout "${STAGE2_S:-200}" "$BIN/lctx" bench -m "$MODEL" --backend cuda -t "$THREADS" -p 2048,8192,32768 \
        --decode-ctx 8192 -r 1 --reform 131072 > "$OUT/bench-cuda.json" 2> "$OUT/bench-cuda.err"
    echo "rc $?"; tail -3 "$OUT/bench-cuda.err"; head -c 3000 "$OUT/bench-cuda.json"; echo
    say "stage 2: lctx bench on cuda, prefill with the flat attention kernel (before the tiled one)"
    LCTX_CUDA_ATTENTION=flat timeout "${STAGE2_S:-200}" "$BIN/lctx" bench -m "$MODEL" --backend cuda -t "$THREADS" -p 8192,32768 \
        --decode-ctx 0 -r 1 > "$OUT/bench-cuda-flat.json" 2> "$OUT/bench-cuda-flat.err"
    echo "rc $?"; tail -3 "$OUT/bench-cuda-flat.err"; head -c 1500 "$OUT/bench-cuda-flat.json"; echo
    [ "${CPU_BENCH:-1}" = 0 ] || { say "stage 2: lctx bench on the CPU of the same machine"
    timeout 120 "$BIN/lctx" bench -m "$MODEL" --backend cpu -t "$THREADS" -p 2048,8192 \
        --decode-ctx 8192 -r 1 > "$OUT/bench-cpu.json" 2> "$OUT/bench-cpu.err"
    echo "rc $?"; tail -3 "$OUT/bench-cpu.err"; head -c 1500 "$OUT/bench-cpu.json"; echo; }
fi

if stage 3 && [ -n "${EVAL_ARGS:-}" ]; then
    say "stage 3: lctx eval on cuda for ${EVAL_S:-300} s: $EVAL_ARGS"
    # shellcheck disable=SC2086  # EVAL_ARGS is a list of arguments
    timeout "${EVAL_S:-300}" "$BIN/lctx" eval -m "$MODEL" --backend cuda -t "$THREADS" $EVAL_ARGS 2>&1 |
        grep -E "^\[[0-9]+/|rror|arning|not available" | tail -80
fi
say "done"
