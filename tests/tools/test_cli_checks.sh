#!/usr/bin/env bash
# The command line's input checks (lctx run, generate, tokenize, heads, bench,
# eval) on the tiny stories260K model: every bad input exits non-zero with a
# message naming the problem (numbers out of range, no int32 wrap, negative
# values, -t 0, empty or whitespace-only documents, invalid UTF-8 with its
# byte offset), and the good paths still work (--lossy, documented -1/0
# values, sampling options on run, progress stage labels without "0 tok/s").
# usage: test_cli_checks.sh LCTX MODEL.gguf
set -uo pipefail
LCTX=$1
MODEL=$2
[ -f "$MODEL" ] || { echo "FAIL: test model $MODEL not found"; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
failures=0 passed=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

printf 'Lily had a red ball. She played with it in the park every day. Her dog Max liked the ball too.\n' > "$T/doc.txt"
: > "$T/empty.txt"
printf '  \n\t \r\n  ' > "$T/blank.txt"
printf 'Lily had a red ball.\xff She played.\n' > "$T/bad.txt"          # 0xFF at byte 20
printf 'caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 ok\n' > "$T/good_utf8.txt"  # é € 😀: valid
RUN=(run -m "$MODEL" --file "$T/doc.txt" --question "What did Lily have?" -n 8 -t 1 --no-chat)   # no chat template

# expect_fail "pattern" args...: non-zero exit, and stderr matches the (grep -E) pattern.
expect_fail() {
    [ "$1" = "--" ] && shift   # "expect_fail -- PATTERN ...": the pattern may start with "--"
    local pat=$1; shift
    "$LCTX" "$@" > "$T/out" 2> "$T/err"
    local rc=$?
    if [ $rc -eq 0 ]; then fail "exit 0 for: $* (expected an error matching '$pat')"; return; fi
    if ! grep -Eq -- "$pat" "$T/err"; then fail "for: $*: stderr does not match '$pat': $(head -c 400 "$T/err")"; return; fi
    passed=$((passed + 1))
}
# expect_ok args...: exit 0 (stdout in $T/out, stderr in $T/err).
expect_ok() {
    "$LCTX" "$@" > "$T/out" 2> "$T/err"
    local rc=$?
    if [ $rc -ne 0 ]; then fail "exit $rc for: $*: $(head -c 400 "$T/err")"; return 1; fi
    passed=$((passed + 1))
}

# --- numbers: ranges, no wrap, negatives, junk
expect_fail -- '--budget 4294967297 is out of range: expected an integer from 1 to 2147483647' "${RUN[@]}" --budget 4294967297
expect_fail -- '--budget 99999999999999999999 is out of range' "${RUN[@]}" --budget 99999999999999999999
expect_fail -- '--budget -5 is out of range' "${RUN[@]}" --budget -5
expect_fail -- '--budget 0 is out of range' "${RUN[@]}" --budget 0
expect_fail -- '--budget expects an integer, got .12x.' "${RUN[@]}" --budget 12x
expect_fail -- '--budget expects an integer' "${RUN[@]}" --budget 1.5
expect_fail -- '--threads 0 is out of range: expected an integer from 1' "${RUN[@]}" -t 0
expect_fail -- '--threads -1 is out of range' "${RUN[@]}" -t -1
expect_fail -- '--threads 4294967297 is out of range' "${RUN[@]}" --threads 4294967297
expect_fail -- '--chunk -1 is out of range' "${RUN[@]}" --chunk -1
expect_fail -- '--working 2147483648 is out of range' "${RUN[@]}" --working 2147483648
expect_fail -- '--repeat-window must be -1 \(off\) or at least 2' "${RUN[@]}" --repeat-window 1
expect_fail -- '--repeat-window -2 is out of range' "${RUN[@]}" --repeat-window -2
expect_fail -- '--ctx -1 is out of range' "${RUN[@]}" --ctx -1
expect_fail -- '--n-predict -1 is out of range' "${RUN[@]}" -n -1
expect_fail -- '--n-predict 4294967360 is out of range' "${RUN[@]}" -n 4294967360
expect_fail -- '--store-ram -1 is out of range' "${RUN[@]}" --method reattention --store-ram -1
expect_fail -- '--spans -2 is out of range: expected .*-1' "${RUN[@]}" --method reattention --spans -2
expect_fail -- '--local 0 is out of range: expected -1 \(derived from the model\) or an integer from 1' \
    "${RUN[@]}" --method reattention --local 0
expect_fail -- '--vote-k 65 is out of range' "${RUN[@]}" --method reattention --vote-k 65
expect_fail -- '--span 3 must be even' "${RUN[@]}" --method reattention --span 3
expect_fail -- '--reuse 0 is out of range' "${RUN[@]}" --method reattention --reuse 0
expect_fail -- '--top-k is the sampling top-k.*--vote-k' "${RUN[@]}" --method reattention --top-k 4
expect_fail -- '--layer -2 is out of range' "${RUN[@]}" --method ilre --layer -2
expect_fail -- '--layer 999 is out of range: the model has [0-9]+ layers' "${RUN[@]}" --method ilre --layer 999
expect_fail -- '--rkv-stride 0 is out of range' "${RUN[@]}" --decode refreshkv --rkv-stride 0
expect_fail -- '--rkv-threshold expects a number' "${RUN[@]}" --decode refreshkv --rkv-threshold nan
expect_fail -- '--rkv-threshold inf is out of range' "${RUN[@]}" --decode refreshkv --rkv-threshold inf

# --- sampling options of run (and generate: the same parser)
expect_fail -- '--temp -0.5 is out of range: expected a number from 0' "${RUN[@]}" --temp -0.5
expect_fail -- '--temp expects a number' "${RUN[@]}" --temp warm
expect_fail -- '--top-k -1 is out of range' "${RUN[@]}" --top-k -1
expect_fail -- '--top-k 4294967297 is out of range' "${RUN[@]}" --top-k 4294967297
expect_fail -- '--top-p 0 is out of range: expected a number from 0 \(excluded\) to 1' "${RUN[@]}" --top-p 0
expect_fail -- '--top-p 1.5 is out of range' "${RUN[@]}" --top-p 1.5
expect_fail -- '--min-p -0.1 is out of range' "${RUN[@]}" --min-p -0.1
expect_fail -- '--repeat-penalty 0 is out of range' "${RUN[@]}" --repeat-penalty 0
expect_fail -- '--repeat-last-n -2 is out of range' "${RUN[@]}" --repeat-last-n -2
expect_fail -- '--seed -1 is out of range: expected an integer from 0 to 18446744073709551615' "${RUN[@]}" --seed -1
expect_fail -- '--seed 18446744073709551616 is out of range' "${RUN[@]}" --seed 18446744073709551616
expect_fail -- '--temp -1 is out of range' generate -m "$MODEL" -p "Once" --temp -1
expect_fail -- '--top-k -3 is out of range' generate -m "$MODEL" -p "Once" --top-k -3
expect_fail -- '--threads 0 is out of range' generate -m "$MODEL" -p "Once" -t 0
expect_fail -- '--ctx 0 is out of range' generate -m "$MODEL" -p "Once" -c 0
expect_fail -- '--prompt-ids: 4294967297 is out of range' generate -m "$MODEL" --prompt-ids "1 4294967297"

# --- other commands
expect_fail -- '--repeats 0 is out of range' bench -m "$MODEL" --repeats 0
expect_fail -- '--threads -4 is out of range' bench -m "$MODEL" -t -4
expect_fail -- '--samples 0 is out of range' eval -m "$MODEL" --out "$T/e.jsonl" --samples 0
expect_fail -- '--seed -1 is out of range' eval -m "$MODEL" --out "$T/e.jsonl" --seed -1
expect_fail -- '--samples -1 is out of range' heads -m "$MODEL" --samples -1
expect_fail -- '--depth 0 is out of range' heads -m "$MODEL" --depth 0
expect_fail -- '--seed 4294967296 is out of range' heads -m "$MODEL" --seed 4294967296
expect_fail -- '--n-decode 0 is out of range' bench-refreshkv -m "$MODEL" -n 0
expect_fail -- "--continuation must be 'greedy' or 'text'" bench-refreshkv -m "$MODEL" --continuation foo
expect_fail -- '--continuation text needs --file' bench-refreshkv -m "$MODEL" --continuation text
printf 'A short text.' > "$T/short_text.txt"
expect_fail -- 'fewer than --ctx \+ --n-decode' bench-refreshkv -m "$MODEL" --file "$T/short_text.txt" --continuation text
if expect_ok bench-refreshkv -m "$MODEL" --file "$T/doc.txt" --ctx 8 -n 4 -t 1 --stride 2 --continuation text; then
    grep -q '"continuation": "text"' "$T/out" || fail "bench-refreshkv --continuation text: no continuation field in $(head -c 300 "$T/out")"
fi

# --- documents: empty, blank, invalid UTF-8 (with its byte offset)
expect_fail -- "--file $T/empty.txt is empty" run -m "$MODEL" --file "$T/empty.txt" --question "q?" -n 4
expect_fail -- "--file $T/blank.txt holds only whitespace" run -m "$MODEL" --file "$T/blank.txt" --question "q?" -n 4
expect_fail -- "--file $T/bad.txt is not valid UTF-8: invalid byte sequence at byte offset 20 \(bytes 0xFF" \
    run -m "$MODEL" --file "$T/bad.txt" --question "q?" -n 4
expect_fail -- '--lossy' run -m "$MODEL" --file "$T/bad.txt" --question "q?" -n 4
expect_fail -- '--question is empty' run -m "$MODEL" --file "$T/doc.txt" --question "" -n 4
expect_fail -- '--question is not valid UTF-8: invalid byte sequence at byte offset 4' \
    run -m "$MODEL" --file "$T/doc.txt" --question $'what\xc3(' -n 4
expect_fail -- "--file $T/empty.txt is empty" generate -m "$MODEL" -f "$T/empty.txt"
expect_fail -- '--prompt holds only whitespace' generate -m "$MODEL" -p "   "
expect_fail -- 'byte offset 20' generate -m "$MODEL" -f "$T/bad.txt"
# UTF-8 corner cases through tokenize: overlong, surrogate, past U+10FFFF, truncated, lone continuation.
expect_fail -- 'byte offset 1 \(bytes 0xC0 0xAF' tokenize -m "$MODEL" $'a\xc0\xafb'
expect_fail -- 'byte offset 2 \(bytes 0xED 0xA0 0x80' tokenize -m "$MODEL" $'ab\xed\xa0\x80'
expect_fail -- 'byte offset 0 \(bytes 0xF4 0x90' tokenize -m "$MODEL" $'\xf4\x90\x80\x80'
expect_fail -- 'byte offset 3 \(bytes 0xE2 0x82\)' tokenize -m "$MODEL" $'abc\xe2\x82'
expect_fail -- 'byte offset 0 \(bytes 0x80' tokenize -m "$MODEL" $'\x80abc'
expect_fail -- 'byte offset 1 \(bytes 0xE0 0x80' tokenize -m "$MODEL" $'a\xe0\x80\x80'   # overlong 3-byte

# --- good paths
expect_ok tokenize -m "$MODEL" "$(cat "$T/good_utf8.txt")" || true
# --lossy: each maximal invalid subpart is one U+FFFD (a\xffb and a\xe2\x82b both become a<U+FFFD>b).
if expect_ok tokenize -m "$MODEL" --lossy $'a\xffb'; then
    lossy=$(cat "$T/out")
    expect_ok tokenize -m "$MODEL" $'a\xef\xbf\xbdb' && [ "$(cat "$T/out")" = "$lossy" ] ||
        fail "--lossy a\\xffb does not tokenize as a U+FFFD b: '$lossy' vs '$(cat "$T/out")'"
    expect_ok tokenize -m "$MODEL" --lossy $'a\xe2\x82b' && [ "$(cat "$T/out")" = "$lossy" ] ||
        fail "--lossy a\\xe2\\x82b (truncated sequence) is not one U+FFFD: '$(cat "$T/out")'"
fi
if expect_ok "${RUN[@]}"; then
    [ -s "$T/out" ] || fail "run printed no answer"
    greedy=$(cat "$T/out")
fi
expect_ok run -m "$MODEL" --no-chat --file "$T/bad.txt" --lossy --question "What did Lily have?" -n 4 -t 1 || true
expect_ok run -m "$MODEL" --no-chat --file "$T/good_utf8.txt" --question "What?" -n 4 -t 1 || true
# the documented -1 and 0 of ReAttention, and -1 of ILRe's --layer
expect_ok "${RUN[@]}" --method reattention --spans 0 || true
# --answer-prefix: the end of a plain prompt only (a chat prompt ends with the assistant's header)
expect_fail -- '--answer-prefix goes with --no-chat' run -m "$MODEL" --file "$T/doc.txt" --question "What?" -n 4 -t 1 \
    --answer-prefix "Lily had"
expect_fail -- '--answer-prefix is not valid UTF-8: invalid byte sequence at byte offset 1' "${RUN[@]}" --answer-prefix "$(printf 'a\xffb')"
expect_ok "${RUN[@]}" --answer-prefix "Lily had a" --json || true
expect_ok "${RUN[@]}" --method reattention --spans -1 --global -1 --local -1 --span -1 --vote-k -1 || true
expect_ok "${RUN[@]}" --method reattention --vote-k 2 || true
expect_ok "${RUN[@]}" --method ilre --layer -1 || true
expect_ok "${RUN[@]}" --budget 300 --ctx 1024 || true
# sampling on run: explicit greedy = default; a seeded sample is reproducible
if expect_ok "${RUN[@]}" --temp 0 --top-k 0 --top-p 1 --min-p 0 --repeat-penalty 1 --seed 0; then
    [ "$(cat "$T/out")" = "${greedy:-}" ] || fail "explicit greedy differs from the default: '$(cat "$T/out")' vs '${greedy:-}'"
fi
S=(--temp 1.5 --top-k 40 --top-p 0.95 --min-p 0.01 --repeat-penalty 1.1 --repeat-last-n -1 --seed 18446744073709551615)
if expect_ok "${RUN[@]}" -n 24 "${S[@]}"; then
    first=$(cat "$T/out")
    expect_ok "${RUN[@]}" -n 24 "${S[@]}" && [ "$(cat "$T/out")" = "$first" ] || fail "the same seed gave another answer"
    # the options reach the sampler: 4 seeds at temperature 1.5 do not all give the greedy answer
    differs=0
    for seed in 1 2 3 4; do
        "$LCTX" "${RUN[@]}" -n 24 --temp 1.5 --seed $seed > "$T/out" 2>/dev/null && [ "$(cat "$T/out")" != "${greedy:-}" ] && differs=1
    done
    [ $differs = 1 ] && passed=$((passed + 1)) || fail "--temp 1.5 with 4 seeds always gave the greedy answer"
fi
expect_ok "${RUN[@]}" --method reattention --top-k 4 --temp 0.7 --seed 3 || true   # sampling top-k with sampling: fine
expect_ok generate -m "$MODEL" -p "Once upon a time" -n 8 -t 1 --temp 0.8 --top-k 20 --top-p 0.9 --seed 5 || true
# progress: one line per stage, no "0 tok/s" on a short input
if expect_ok "${RUN[@]}" --progress --json; then
    tr '\r' '\n' < "$T/err" > "$T/progress"
    for stage in encoding indexing selecting recompute decoding; do
        grep -q "^$stage *\[" "$T/progress" || fail "no '$stage' progress line: $(head -c 600 "$T/progress")"
    done
    grep -Eq '(^|[^0-9.])0 tok/s' "$T/progress" && fail "the progress shows 0 tok/s: $(grep 'tok/s' "$T/progress")"
    grep -q 'ETA' "$T/progress" && fail "an ETA on a short input: $(grep ETA "$T/progress")"
    grep -q '"answer"' "$T/out" || fail "--json printed no answer object"
fi
if expect_ok "${RUN[@]}"; then
    grep -Eq '(^|[^0-9.])0 tok/s' "$T/err" && fail "the summary shows 0 tok/s: $(cat "$T/err")"
fi
# --set: method struct fields over the options (REFORM gathers exactly recompute tokens of a long enough document);
#        unknown keys and bad values are refused before the model loads, values the library refuses at session create
if expect_ok "${RUN[@]}" --json --set recompute=20:keep_first=2:keep_last=2:pool_half=1; then
    grep -q '"n_selected": 20,' "$T/out" || fail "--set recompute=20 did not gather 20 tokens: $(head -c 300 "$T/out")"
fi
expect_fail -- "--set bogus=1: 'bogus' is not a parameter of reform \\(chunk, budget, recompute" "${RUN[@]}" --set bogus=1
expect_fail -- '--set recompute=4k: reform.recompute=4k: expected an integer' "${RUN[@]}" --set recompute=4k
expect_fail -- 'lctx_kv_params.budget = -5 is negative' "${RUN[@]}" --method h2o --set budget=-5
expect_fail -- "'full' has no parameters" "${RUN[@]}" --method full --set budget=5
expect_ok "${RUN[@]}" --decode refreshkv --set refreshkv.stride=2:recompute=48 || true
# --save-index: refused before the encoding when the file could not be written
expect_fail "--save-index .*/nodir/idx.bin: the directory .*/nodir does not exist" "${RUN[@]}" --save-index "$T/nodir/idx.bin"
expect_fail "--save-index works with --method reform or ilre" "${RUN[@]}" --method full --save-index "$T/full.idx"
# a save that fails after the encoding (here: the path is a directory) still answers, then exits 1
mkdir -p "$T/adir"
expect_fail "saving the index failed .*answering anyway" "${RUN[@]}" --json --save-index "$T/adir"
grep -q '"answer"' "$T/out" || fail "a failed --save-index lost the answer: $(head -c 400 "$T/out")"
# --save-index / --index: no encode rate to show
if expect_ok "${RUN[@]}" --save-index "$T/idx.bin"; then
    expect_ok run -m "$MODEL" --no-chat --index "$T/idx.bin" --question "What did Lily have?" -n 8 -t 1 &&
        { grep -q 'index loaded in' "$T/err" || fail "no 'index loaded' in: $(cat "$T/err")"; }
    grep -Eq '(^|[^0-9.])0 tok/s' "$T/err" && fail "--index shows 0 tok/s: $(cat "$T/err")"
fi
# --probe / --probes: the methods that score tokens, one probe per question, the indexed document
printf 'What did Lily have?\nWho liked the ball?\n' > "$T/q2.txt"
printf 'a red ball\n' > "$T/p1.txt"
printf 'a red ball\nHer dog Max\n' > "$T/p2.txt"
expect_fail "--probe works with --method reform or ilre" "${RUN[@]}" --method full --probe "red ball"
expect_fail "--probes FILE goes with --questions" "${RUN[@]}" --probes "$T/p2.txt"
expect_fail "has 1 probes for 2 questions" run -m "$MODEL" --no-chat --file "$T/doc.txt" --questions "$T/q2.txt" \
    --probes "$T/p1.txt" -n 2 -t 1
if expect_ok run -m "$MODEL" --no-chat --file "$T/doc.txt" --questions "$T/q2.txt" --probes "$T/p2.txt" \
        --probe "no such words" -n 2 -t 1 --json; then
    [ "$(grep -c '"probes": \[' "$T/out")" = 2 ] || fail "--probes: not one probes list per answer: $(cat "$T/out")"
    grep -q '"text": "Her dog Max", "found": true' "$T/out" || fail "--probes: line 2 not probed: $(cat "$T/out")"
    grep -q '"text": "no such words", "found": false' "$T/out" || fail "--probe: a miss not reported: $(cat "$T/out")"
fi
if expect_ok "${RUN[@]}" --method ilre --probe "red ball"; then
    grep -q 'probe "red ball": tokens' "$T/err" || fail "no probe line on stderr: $(cat "$T/err")"
fi
if [ -f "$T/idx.bin" ]; then
    expect_fail "--probe with --index needs --file" run -m "$MODEL" --no-chat --index "$T/idx.bin" \
        --question "What did Lily have?" --probe "red ball"
    expect_fail "--probe needs the indexed document" run -m "$MODEL" --no-chat --index "$T/idx.bin" \
        --file "$T/good_utf8.txt" --question "What did Lily have?" --probe "red ball" -n 2 -t 1
    expect_ok run -m "$MODEL" --no-chat --index "$T/idx.bin" --file "$T/doc.txt" --question "What did Lily have?" \
        --probe "red ball" -n 2 -t 1 --json && { grep -q '"found": true' "$T/out" || fail "--index probe: $(cat "$T/out")"; }
fi
# --profile-ops: per-op times of the session, a table on stderr or "op_times" in --json;
# an eval row carries them too. FULL over the tiny model attends once per layer and pass.
if expect_ok "${RUN[@]}" --method full --profile-ops --json; then
    python3 - "$T/out" <<'PY' || fail "run --profile-ops --json: $(head -c 600 "$T/out")"
import json, sys
j = json.loads(open(sys.argv[1]).read())
ops = j["op_times"]["ops"]
assert ops["attention"]["calls"] > 0 and ops["matmul"]["calls"] > 0, ops
assert sum(o["s"] for o in ops.values()) <= j["op_times"]["lifetime_s"], j["op_times"]
assert list(ops) == sorted(ops, key=lambda k: -ops[k]["s"]), "ops not ordered by time"
PY
fi
expect_ok "${RUN[@]}" --method full --profile-ops && { grep -q "ops over the session's" "$T/err" &&
    grep -Eq '^  attention +[0-9]+ ' "$T/err" && grep -q '(no op)' "$T/err" || fail "run --profile-ops table: $(cat "$T/err")"; }
expect_ok "${RUN[@]}" --method full --json && { grep -q '"op_times"' "$T/out" && fail "op_times without --profile-ops"; }
expect_ok eval -m "$MODEL" --methods full --tasks niah_single --lengths 384 --samples 1 -t 1 --profile-ops \
    --out "$T/prof.jsonl" && { grep '"method"' "$T/prof.jsonl" | grep -q '"op_times": {"lifetime_s"' ||
    fail "eval --profile-ops row: $(tail -c 600 "$T/prof.jsonl")"; }

# heads: -o, --output and --out (README) are the same option
expect_ok heads --out "$T/h.json" --help && grep -q -- '-o, --output FILE' "$T/out" || fail "heads --out not accepted"
expect_ok heads --ilre --out "$T/h.json" --help || true
expect_fail -- "unknown option '--outt'" heads --outt "$T/h.json" -m "$MODEL"

# --- the version line names the source revision it was built from (cmake/lctx_revision.cmake)
expect_ok --version
grep -qE '^lctx 0\.[0-9]+\.[0-9]+ \(([0-9a-f]{10}(-modified)?|unknown)\); compiler ' "$T/out" ||
  fail "--version without the source revision: $(cat "$T/out")"

echo "cli checks: $passed passed, $failures failed"
[ $failures -eq 0 ]
