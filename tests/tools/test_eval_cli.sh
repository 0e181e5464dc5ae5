#!/usr/bin/env bash
# End-to-end test of `lctx eval` on a tiny real model: rows and their fields,
# resume without duplicates (a second run, and a run killed midway), the
# markdown report, --report, error rows, the plot notice without Python, and the
# long-form tasks (kv_list, ppl) with reform+refreshkv.
# usage: test_eval_cli.sh LCTX MODEL.gguf [WRITE_TINY_MODEL]
set -euo pipefail
LCTX=$1
MODEL=$2
WRITE_TINY=${3:-}
[ -f "$MODEL" ] || { echo "FAIL: test model $MODEL not found (stories260K.gguf is committed under tests/data/)"; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# lctx eval prints its markdown report on stdout: it goes to a file, so that this test's own lines (fd 3) are all
# that ctest shows, and a FAIL line is never lost among reports. A command that fails unguarded names its line.
exec 3>&1 >"$T/stdout.log"
fail() { echo "FAIL: $*" >&3; exit 1; }
trap 'echo "FAIL: line $LINENO: $BASH_COMMAND exited with status $?" >&3' ERR
rows() { if [ -f "$1" ]; then grep -c '"method"' "$1" || true; else echo 0; fi; }
# Combinations (method task length sample) that occur more than once.
dups() { grep -o '"method": "[a-z0-9]*", "task": "[a-z_]*", "length": [0-9]*, "sample": [0-9]*' "$1" | sort | uniq -d; }
# kill_after_rows FILE N LOG ARGS...: runs lctx ARGS in the background (stderr to LOG) and kills it (SIGTERM)
# once FILE holds more than N rows, or when it ends first.
kill_after_rows() {
  local file=$1 n=$2 log=$3
  shift 3
  "$LCTX" "$@" 2> "$log" &
  local pid=$!
  for _ in $(seq 1 600); do
    [ "$(rows "$file")" -gt "$n" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

ARGS=(eval -m "$MODEL" --methods full,reform --tasks niah_single,vt --lengths 512 --threads 1)

# 1. A first run: 2 methods x 2 tasks x 1 sample.
"$LCTX" "${ARGS[@]}" --samples 1 --out "$T/r.jsonl" --md "$T/r.md" 2> "$T/log1"
[ "$(rows "$T/r.jsonl")" = 4 ] || fail "expected 4 rows, got $(rows "$T/r.jsonl")"
grep -q '^\[4/4\] reform vt 512 0 on cpu -> ' "$T/log1" || fail "no progress line: $(cat "$T/log1")"
while IFS= read -r line; do
  case $line in *'"kind": "run"'*) continue ;; esac
  for f in '"method": ' '"task": ' '"length": 512' '"sample": 0' '"seed": 42' '"n_input_tokens": ' \
           '"score": ' '"answer": ' '"expected": \[' '"timings_s": {"load": ' '"recompute": ' '"decode": ' \
           '"encode_tokens_per_s": ' '"peak_rss_mib": ' '"wall_s": ' '"cpu": "[^"]' '"cpu_kernels": "[a-z0-9_]' '"backend": "cpu"' \
           '"build": "\([0-9a-f]\{10\}\(-modified\)\{0,1\}\|unknown\)"'; do
    echo "$line" | grep -q "$f" || fail "field $f missing in: $line"
  done
  echo "$line" | grep -q '"error"' && fail "unexpected error row: $line"
done < "$T/r.jsonl"
grep -q '"kind": "run", "command": "lctx eval -m ' "$T/r.jsonl" || fail "no run row with the command line"

# 2. The markdown report.
for s in '## Average over tasks' '## niah_single' '## vt' '## Time and memory' '| method | 512 |' '| full |' \
         '| reform |' 'lctx eval -m ' 'Rows per CPU' 'Rows per build'; do
  grep -qF -- "$s" "$T/r.md" || fail "report lacks '$s'"
done

# 3. Running the same command again adds nothing.
"$LCTX" "${ARGS[@]}" --samples 1 --out "$T/r.jsonl" --md "$T/r.md" 2> "$T/log2"
[ "$(rows "$T/r.jsonl")" = 4 ] || fail "a rerun added rows"
grep -q 'already in' "$T/log2" || fail "the rerun did not report skipped combinations"

# 4. A run killed after its first new row, then resumed: 3 samples -> 12 rows, no duplicates.
kill_after_rows "$T/r.jsonl" 4 "$T/log3" "${ARGS[@]}" --samples 3 --out "$T/r.jsonl"
echo "rows after the kill: $(rows "$T/r.jsonl")" >&3
"$LCTX" "${ARGS[@]}" --samples 3 --out "$T/r.jsonl" --md "$T/r.md" 2> "$T/log4"
[ "$(rows "$T/r.jsonl")" = 12 ] || fail "expected 12 rows after resuming, got $(rows "$T/r.jsonl")"
# The first rows were made with --samples 1: their needles sit at other depths, and the run says so.
grep -q 'holds 512 rows made with --samples 1: their needles sit at depths (i + 0.5) / 1, this run.s at (i + 0.5) / 3' "$T/log4" ||
  fail "no warning about rows of another --samples: $(cat "$T/log4")"
[ -z "$(dups "$T/r.jsonl")" ] || fail "duplicate rows: $(dups "$T/r.jsonl")"

# 4b. --first-samples K runs samples 0..K-1 of the --samples N: the very rows (needle depth, sample seed, answer)
# that a full run makes for them, and a later run with --samples N alone adds only the rest. (r.jsonl's sample 0
# rows are step 1's, made with --samples 1: a fresh full run is the reference.)
"$LCTX" "${ARGS[@]}" --samples 3 --out "$T/g.jsonl" 2> "$T/log4a"
"$LCTX" "${ARGS[@]}" --samples 3 --first-samples 1 --out "$T/f.jsonl" 2> "$T/log4b"
[ "$(rows "$T/f.jsonl")" = 4 ] || fail "--first-samples 1 of 3: expected 4 rows, got $(rows "$T/f.jsonl")"
grep -q -- '--first-samples 1' "$T/f.jsonl" || fail "the run row does not record --first-samples"
same_fields() { grep -o '"method": "[a-z]*", "task": "[a-z_]*", "length": 512, "sample": 0, .*"depth": [0-9.]*' "$1" | sort; }
[ -n "$(same_fields "$T/f.jsonl")" ] && [ "$(same_fields "$T/f.jsonl")" = "$(same_fields "$T/g.jsonl")" ] ||
  fail "--first-samples rows differ from the full run's sample 0: $(same_fields "$T/f.jsonl") vs $(same_fields "$T/g.jsonl")"
answers() { grep -o '"sample": 0, .*"answer": "[^"]*"' "$1" | sed 's/"n_input_tokens".*"answer"/"answer"/' | sort; }
[ -n "$(answers "$T/f.jsonl")" ] && [ "$(answers "$T/f.jsonl")" = "$(answers "$T/g.jsonl")" ] || fail "--first-samples answers differ from the full run's"
grep -q '"sample": [12]' "$T/f.jsonl" && fail "--first-samples 1 ran samples past the first"
grep -q 'their needles sit at depths' "$T/log4b" && fail "--first-samples warned about its own --samples"
"$LCTX" "${ARGS[@]}" --samples 3 --out "$T/f.jsonl" 2> "$T/log4c"
[ "$(rows "$T/f.jsonl")" = 12 ] && [ -z "$(dups "$T/f.jsonl")" ] ||
  fail "completing a --first-samples run: $(rows "$T/f.jsonl") rows, duplicates: $(dups "$T/f.jsonl")"
grep -q '4 combination(s) already in' "$T/log4c" || fail "the completing run did not skip the first samples: $(cat "$T/log4c")"
for bad in "--first-samples 4" "--first-samples 0"; do
  if "$LCTX" "${ARGS[@]}" --samples 3 $bad --out "$T/x.jsonl" 2> "$T/log4d"; then fail "$bad of --samples 3 was accepted"; fi
  grep -q -- '--first-samples' "$T/log4d" || fail "$bad: no message naming --first-samples: $(cat "$T/log4d")"
done
[ ! -s "$T/x.jsonl" ] || fail "a refused --first-samples run wrote rows"

# 5. --report only; a missing Python is a notice, not a failure.
LCTX_PYTHON=/nonexistent/python3 "$LCTX" eval --report "$T/r.jsonl" --md "$T/r2.md" --plot "$T/p.png" 2> "$T/log5"
grep -qF '## vt' "$T/r2.md" || fail "--report wrote no report"
grep -q 'no plot drawn' "$T/log5" || fail "no notice about the missing Python: $(cat "$T/log5")"

# 6. A failing method (ILRE: LCTX_ERR_UNSUPPORTED so far) is a row, not a crash.
"$LCTX" eval -m "$MODEL" --methods ilre --tasks vt --lengths 512 --samples 1 --out "$T/e.jsonl" 2> "$T/log6" ||
  fail "eval failed on an unsupported method: $(cat "$T/log6")"
[ "$(rows "$T/e.jsonl")" = 1 ] || fail "no row for the failing method"
grep -q '"score": null, ' "$T/e.jsonl" && { grep -q '"error": ' "$T/e.jsonl" || fail "null score without an error"; }
# 7. Long-form tasks: kv_list (pairs_in_order) and ppl (teacher-forced perplexity, its own report table), with
#    the eval-only variant reform+refreshkv (RefreshKV statistics in its rows); +refreshkv on other methods is refused.
"$LCTX" eval -m "$MODEL" --methods full,reform+refreshkv --tasks kv_list,ppl --lengths 512 --samples 1 --threads 1 \
  --out "$T/l.jsonl" --md "$T/l.md" 2> "$T/log7" || fail "long-form eval failed: $(cat "$T/log7")"
[ "$(rows "$T/l.jsonl")" = 4 ] || fail "expected 4 long-form rows, got $(rows "$T/l.jsonl")"
grep -q '"error"' "$T/l.jsonl" && fail "error row in the long-form run: $(grep '"error"' "$T/l.jsonl")"
grep '"task": "kv_list"' "$T/l.jsonl" | grep -q '"scoring": "pairs_in_order"' || fail "kv_list row not pairs_in_order"
grep '"task": "ppl"' "$T/l.jsonl" | grep -q '"scoring": "perplexity".*"nll": [0-9.]*, "n_scored": [0-9]*' ||
  fail "ppl row without nll/n_scored: $(grep '"task": "ppl"' "$T/l.jsonl")"
grep '"method": "reform+refreshkv"' "$T/l.jsonl" | grep -q '"refreshkv": {"partial": ' ||
  fail "reform+refreshkv rows without RefreshKV statistics"
grep '"method": "full"' "$T/l.jsonl" | grep -q '"refreshkv"' && fail "a dense row has RefreshKV statistics"
grep -qF '## ppl (perplexity, lower is better)' "$T/l.md" || fail "report lacks the perplexity table"
grep -qF '## kv_list' "$T/l.md" || fail "report lacks the kv_list table"
if "$LCTX" eval -m "$MODEL" --methods snapkv+refreshkv --tasks ppl --lengths 512 --out "$T/x.jsonl" 2> "$T/log8"; then
  fail "snapkv+refreshkv was accepted"
fi
grep -q 'works with reform and ilre only' "$T/log8" || fail "no message for snapkv+refreshkv: $(cat "$T/log8")"
# 8. The oracle and gather recall. The oracle is FULL on the same sample cut to --oracle-tokens: the same needle,
#    a short input. Recall: FULL keeps every needle token; truncation at 3K (it keeps the first and last 512 tokens
#    of this 2K-context model) drops a needle at depth 0.5; cwe has no needles, so no recall. 3K, not more: FULL's
#    prefill is quadratic, and at 8K this step alone took 145 s under ASan.
"$LCTX" eval -m "$MODEL" --methods full,truncate,oracle --tasks niah_single,cwe --lengths 3k --samples 1 --threads 1 \
  --oracle-tokens 700 --out "$T/o.jsonl" --md "$T/o.md" 2> "$T/log9" || fail "oracle eval failed: $(cat "$T/log9")"
[ "$(rows "$T/o.jsonl")" = 6 ] || fail "expected 6 oracle/recall rows, got $(rows "$T/o.jsonl")"
grep -q '"error"' "$T/o.jsonl" && fail "error row in the oracle run: $(grep '"error"' "$T/o.jsonl")"
row() { grep "\"method\": \"$1\", \"task\": \"$2\"" "$T/o.jsonl"; }
# field ROW NAME: the value of NAME in ROW, empty when the row has none (never a failing status, which set -e
# would turn into an exit without a FAIL line).
field() { echo "$1" | { grep -o "\"$2\": [^,}]*" || true; } | head -1 | sed 's/.*: //'; }
O=$(row oracle niah_single); F=$(row full niah_single); TR=$(row truncate niah_single)
[ "$(field "$O" oracle_tokens)" = 700 ] || fail "oracle row without oracle_tokens 700: $O"
[ "$(field "$O" n_input_tokens)" -le 700 ] || fail "the oracle's input exceeds its window: $O"
[ "$(field "$F" n_input_tokens)" -gt 2900 ] || fail "the full row is not at 3K: $F"
[ "$(echo "$O" | grep -o '"expected": \[[^]]*\]')" = "$(echo "$F" | grep -o '"expected": \[[^]]*\]')" ] ||
  fail "the oracle asks for another needle than the full-length sample"
[ "$(field "$F" recall)" = 1.0000 ] || fail "FULL did not keep its needle: $F"
[ "$(field "$O" recall)" = 1.0000 ] || fail "the oracle did not keep its needle: $O"
[ "$(field "$TR" recall)" = 0.0000 ] || fail "truncation kept a needle from the middle of 3K: $TR"
[ "$(field "$F" needle_tokens)" -gt 0 ] || fail "no needle tokens found: $F"
row full cwe | grep -q '"recall"' && fail "a cwe row has a recall"
for s in '## Accuracy as a share of the oracle' '## Gather recall' '| truncate | 0.00 n=1 |' '| full | 1.00 n=1 |'; do
  grep -qF -- "$s" "$T/o.md" || fail "report lacks '$s'"
done
# 9. essay_niah reads its essays from --essays (here three small files of our own): rows without error, with recall;
#    a missing folder is refused before anything runs.
mkdir -p "$T/essays"
for i in 1 2 3; do
  for j in $(seq 1 40); do echo "Essay $i makes point $j about how small teams build useful things. It adds a second thought."; done > "$T/essays/e$i.txt"
done
"$LCTX" eval -m "$MODEL" --methods full --tasks essay_niah --lengths 512 --samples 2 --threads 1 --essays "$T/essays" \
  --out "$T/s.jsonl" 2> "$T/log10" || fail "essay eval failed: $(cat "$T/log10")"
[ "$(rows "$T/s.jsonl")" = 2 ] || fail "expected 2 essay rows, got $(rows "$T/s.jsonl")"
grep -q '"error"' "$T/s.jsonl" && fail "error row in the essay run: $(grep '"error"' "$T/s.jsonl")"
[ "$(grep -c '"recall": 1.0000' "$T/s.jsonl")" = 2 ] || fail "essay rows without full recall: $(cat "$T/s.jsonl")"
if "$LCTX" eval -m "$MODEL" --methods full --tasks essay_niah --lengths 512 --essays "$T/none" --out "$T/s2.jsonl" 2> "$T/log11"; then
  fail "a missing --essays folder was accepted"
fi
grep -q 'needs the Paul Graham essays' "$T/log11" || fail "no message for a missing --essays folder: $(cat "$T/log11")"
[ ! -s "$T/s2.jsonl" ] || fail "rows were written for a missing --essays folder"

# 10. The bf16 options: the rows say which ran ("attn"/"matmul": "bf16"), and a results file holds one setting
#     (the f32 file of section 1 refuses a bf16 run and is left as it was).
"$LCTX" "${ARGS[@]}" --samples 1 --attn bf16 --matmul bf16 --out "$T/b.jsonl" 2> "$T/log12" || fail "bf16 eval failed: $(cat "$T/log12")"
[ "$(grep -c '"attn": "bf16", "matmul": "bf16"' "$T/b.jsonl")" = 4 ] || fail "bf16 rows lack their fields: $(cat "$T/b.jsonl")"
cp "$T/r.jsonl" "$T/r_before.jsonl"
if "$LCTX" "${ARGS[@]}" --samples 2 --attn bf16 --out "$T/r.jsonl" 2> "$T/log13"; then
  fail "a bf16 run was appended to an f32 results file"
fi
grep -q 'holds rows measured with --attn f32 --matmul f32' "$T/log13" || fail "no message for mixed settings: $(cat "$T/log13")"
cmp -s "$T/r.jsonl" "$T/r_before.jsonl" || fail "the refused run changed the results file"
if "$LCTX" "${ARGS[@]}" --samples 1 --attn fp8 --out "$T/x.jsonl" 2> "$T/log14"; then fail "--attn fp8 was accepted"; fi
grep -q -- '--attn must be f32 or bf16' "$T/log14" || fail "no message for --attn fp8: $(cat "$T/log14")"

# 11. --kv-type (docs/kv-storage.md): q8 rows say so ("kv": "q8"); a results file holds one type, and a bad
#     type is refused by name.
"$LCTX" "${ARGS[@]}" --samples 1 --kv-type q8 --out "$T/q.jsonl" 2> "$T/log15" || fail "q8 eval failed: $(cat "$T/log15")"
[ "$(grep -c '"kv": "q8"' "$T/q.jsonl")" = 4 ] || fail "q8 rows lack their field: $(cat "$T/q.jsonl")"
grep -q '"error"' "$T/q.jsonl" && fail "q8 runs failed: $(cat "$T/q.jsonl")"
if "$LCTX" "${ARGS[@]}" --samples 2 --kv-type q8 --out "$T/r.jsonl" 2> "$T/log16"; then
  fail "a q8 run was appended to an f32 results file"
fi
grep -q 'holds rows measured with --kv-type f32' "$T/log16" || fail "no message for mixed KV types: $(cat "$T/log16")"
cmp -s "$T/r.jsonl" "$T/r_before.jsonl" || fail "the refused q8 run changed the results file"
if "$LCTX" "${ARGS[@]}" --samples 1 --kv-type q4 --out "$T/x.jsonl" 2> "$T/log17"; then fail "--kv-type q4 was accepted"; fi
grep -q -- '--kv-type must be f32, f16 or q8' "$T/log17" || fail "no message for --kv-type q4: $(cat "$T/log17")"
# 12. Pausing the runs (SIGSTOP to the runner and its child, as one does to free the machine for a benchmark) is
#     not charged to --timeout nor to wall_s: the run paused 2 s longer than its timeout finishes without an
#     error, and its row says how long it was paused (paused_s: the row's own timings_s include the pause).
#     The timeout is 4 s, or 4 times the row's unpaused wall time on a loaded machine. Load that changes between
#     the two runs can still push the paused run's own work past that timeout (CI, running tests side by side),
#     so a failed check runs once more with a timeout 4 times longer, and a pause that stays 2 s longer than it:
#     a pause charged to the run fails both.
"$LCTX" eval -m "$MODEL" --methods full --tasks niah_single --lengths 512 --samples 1 --threads 1 \
  --out "$T/p0.jsonl" 2> "$T/log18" || fail "the unpaused eval failed: $(cat "$T/log18")"
# paused_run TO: runs the sample with --timeout TO, paused for TO + 2 s. PAUSE_FAIL is empty when every check held;
# PAUSED is empty when the run could not be paused while its row was still to come (it ended first, or the runner
# had already written the row when the stop reached it: a loaded machine can delay this script that long).
paused_run() {
  local to=$1 pause=$(($1 + 2)) runner child="" w p
  PAUSE_FAIL="" PAUSED=""
  rm -f "$T/p.jsonl"
  "$LCTX" eval -m "$MODEL" --methods full --tasks niah_single --lengths 512 --samples 1 --threads 1 --timeout "$to" \
    --out "$T/p.jsonl" 2> "$T/log18" &
  runner=$!
  for _ in $(seq 1 1000); do
    child="$(cat /proc/"$runner"/task/*/children 2>/dev/null | tr -s ' ' '\n' | head -1)"
    [ -n "$child" ] && break
    kill -0 "$runner" 2>/dev/null || break
    sleep 0.005
  done
  if [ -n "$child" ] && kill -STOP "$runner" "$child" 2>/dev/null; then
    [ "$(rows "$T/p.jsonl")" = 0 ] && PAUSED=1
    sleep "$pause"
    kill -CONT "$child" "$runner" 2>/dev/null || true
  fi
  wait "$runner" || { PAUSE_FAIL="the paused eval failed: $(cat "$T/log18")"; return 0; }
  grep -q '"error"' "$T/p.jsonl" && { PAUSE_FAIL="the pause was charged to the run: $(grep '"error"' "$T/p.jsonl")"; return 0; }
  w="$(field "$(grep '"method"' "$T/p.jsonl")" wall_s)"
  awk -v w="$w" -v t="$to" 'BEGIN { exit !(w != "" && w < t) }' ||
    { PAUSE_FAIL="wall_s '$w' counts the $pause s pause (timeout $to s)"; return 0; }
  if [ -n "$PAUSED" ]; then
    p="$(field "$(grep '"method"' "$T/p.jsonl")" paused_s)"
    # the pause, less the one poll step (at most 1.25 s) charged across it
    awk -v p="$p" -v s="$pause" 'BEGIN { exit !(p != "" && p >= s - 1.5 && p < s + 60) }' ||
      PAUSE_FAIL="paused_s '$p' is not the $pause s pause"
  fi
  return 0
}
TO="$(awk -v w="$(field "$(grep '"method"' "$T/p0.jsonl")" wall_s)" 'BEGIN { t = 4 * w; print (t > 4 ? int(t) + 1 : 4) }')"
for attempt in 1 2 3; do
  paused_run "$TO"
  [ -n "$PAUSED" ] && break
  echo "note: the run ended before it could be paused (attempt $attempt)" >&3
done
if [ -n "$PAUSE_FAIL" ]; then
  echo "note: the pause check failed with --timeout $TO ($PAUSE_FAIL); once more with --timeout $((4 * TO))" >&3
  paused_run $((4 * TO))
  [ -z "$PAUSE_FAIL" ] || fail "$PAUSE_FAIL"
fi
[ -n "$PAUSED" ] || echo "note: no run could be paused before its row; paused_s was not checked" >&3
# 13. The results file replaced while a run goes on (as `git stash` and `git stash pop` do: a new file at the same
#     path): the rows that follow land in the file at the path, none in the unlinked one. The runner is stopped
#     while it waits for a row's child (so it is not writing) and the file is swapped then.
"$LCTX" eval -m "$MODEL" --methods full --tasks niah_single,vt --lengths 512 --samples 2 --threads 1 \
  --out "$T/swap.jsonl" 2> "$T/log19" &
RUNNER=$!
SWAPPED=""
for _ in $(seq 1 4000); do
  kill -0 "$RUNNER" 2>/dev/null || break
  CHILD="$(cat /proc/"$RUNNER"/task/*/children 2>/dev/null | tr -s ' ' '\n' | head -1)"
  if [ -n "$CHILD" ] && [ -f "$T/swap.jsonl" ] && [ "$(rows "$T/swap.jsonl")" -ge 1 ]; then
    kill -STOP "$RUNNER" 2>/dev/null || break
    # still waiting for that child (a zombie not yet reaped counts): the runner is not between a row and its write
    if cat /proc/"$RUNNER"/task/*/children 2>/dev/null | tr -s ' ' '\n' | grep -qx "$CHILD"; then
      cp "$T/swap.jsonl" "$T/swap.tmp" && mv "$T/swap.tmp" "$T/swap.jsonl" && SWAPPED=1
      kill -CONT "$RUNNER" 2>/dev/null || true
      break
    fi
    kill -CONT "$RUNNER" 2>/dev/null || true
  fi
  sleep 0.002
done
wait "$RUNNER" || fail "the run whose file was replaced failed: $(cat "$T/log19")"
[ -n "$SWAPPED" ] || echo "note: the run ended before its file could be swapped; the check did not run" >&3
[ "$(rows "$T/swap.jsonl")" = 4 ] || fail "rows lost after the results file was replaced: $(rows "$T/swap.jsonl") of 4"
[ -z "$(dups "$T/swap.jsonl")" ] || fail "duplicate rows: $(dups "$T/swap.jsonl")"
# 14. Method variants (METHOD:KEY=VALUE, docs/eval.md): each is a method of its own in the rows (with "params") and
#     the report, and its setting takes effect (REFORM gathering 64 tokens loses part of the 36-token needle that its
#     default recompute budget keeps whole). A rerun that spells them in another order finds their rows; settings
#     that are unknown or that the library refuses stop the run before anything is written.
"$LCTX" eval -m "$MODEL" --methods reform,reform:recompute=64,h2o:chunk=128:budget=96 --tasks niah_single \
  --lengths 512 --samples 1 --threads 1 --out "$T/v.jsonl" --md "$T/v.md" 2> "$T/log20" || fail "variant eval failed: $(cat "$T/log20")"
[ "$(rows "$T/v.jsonl")" = 3 ] || fail "expected 3 variant rows, got $(rows "$T/v.jsonl")"
grep -q '"error"' "$T/v.jsonl" && fail "error row in the variant run: $(grep '"error"' "$T/v.jsonl")"
D=$(grep '"method": "reform", ' "$T/v.jsonl"); V=$(grep '"method": "reform:recompute=64", ' "$T/v.jsonl")
echo "$V" | grep -q '"params": {"reform.recompute": 64}' || fail "variant row without its params: $V"
echo "$D" | grep -q '"params"' && fail "a plain method's row has params: $D"
grep '"method": "h2o:budget=96:chunk=128", ' "$T/v.jsonl" | grep -q '"params": {"kv.budget": 96, "kv.chunk": 128}' ||
  fail "no h2o variant row with its params: $(cat "$T/v.jsonl")"
[ "$(field "$D" recall)" = 1.0000 ] || fail "default REFORM lost the needle: $D"
awk -v r="$(field "$V" recall)" 'BEGIN { exit !(r < 1) }' || fail "recompute=64 kept the whole 36-token needle: $V"
for s in '| reform:recompute=64 |' '| h2o:budget=96:chunk=128 |'; do
  grep -qF -- "$s" "$T/v.md" || fail "report lacks '$s'"
done
"$LCTX" eval -m "$MODEL" --methods "h2o:budget=96:chunk=128, reform:recompute=0064" --tasks niah_single --lengths 512 \
  --samples 1 --threads 1 --out "$T/v.jsonl" 2> "$T/log21" || fail "variant rerun failed: $(cat "$T/log21")"
[ "$(rows "$T/v.jsonl")" = 3 ] || fail "the respelled rerun added rows"
cp "$T/v.jsonl" "$T/v_before.jsonl"
for bad in "reform:bogus=1|is not a parameter of reform" "reform:recompute=4k|reform.recompute=4k: expected an integer" \
           "full:budget=8|'full' has no parameters" "h2o:budget=-5|h2o:budget=-5: H2O: lctx_kv_params.budget = -5" \
           "reform,reform:recompute=064,reform:recompute=64|names reform:recompute=64 twice"; do
  if "$LCTX" eval -m "$MODEL" --methods "${bad%%|*}" --tasks niah_single --lengths 512 --samples 2 --out "$T/v.jsonl" \
       2> "$T/log22"; then
    fail "--methods ${bad%%|*} was accepted"
  fi
  grep -qF -- "${bad#*|}" "$T/log22" || fail "no message '${bad#*|}' for ${bad%%|*}: $(cat "$T/log22")"
done
cmp -s "$T/v.jsonl" "$T/v_before.jsonl" || fail "a refused run changed the results file"

# 15. FULL and the RefreshKV methods of a sample share one prefill (stories260K is a llama: FULL's cache keeps every
#     slot). The RefreshKV rows say so and are charged the prefill they did not repeat; every row answers exactly as
#     the same method run from its own prefill (--no-share-prefill): answers, scores, recall and RefreshKV's
#     refresh counts. A unit that dies leaves a row for each of its combinations, rerun by --retry-errors.
SH=(eval -m "$MODEL" --methods full,refreshkv,refreshkv:partial=6:stride=2 --tasks niah_single,kv_list --lengths 700
    --samples 2 --threads 1)
"$LCTX" "${SH[@]}" --out "$T/sh.jsonl" 2> "$T/log30" || fail "shared-prefill eval failed: $(cat "$T/log30")"
"$LCTX" "${SH[@]}" --no-share-prefill --out "$T/nosh.jsonl" 2> "$T/log31" || fail "--no-share-prefill eval failed"
[ "$(rows "$T/sh.jsonl")" = 12 ] || fail "expected 12 shared-prefill rows, got $(rows "$T/sh.jsonl")"
[ "$(grep -c '"prefill_shared_with": "full"' "$T/sh.jsonl")" = 8 ] || fail "expected 8 rows on FULL's prefill"
grep '"method": "full"' "$T/sh.jsonl" | grep -q prefill_shared_with && fail "a FULL row claims a shared prefill"
grep -q prefill_shared_with "$T/nosh.jsonl" && fail "--no-share-prefill shared a prefill"
grep -q ', prefill of full)' "$T/log30" || fail "no progress line for a shared row: $(cat "$T/log30")"
# same_rows.py SHARED SEPARATE N: the N rows of both files answer alike, and the shared RefreshKV rows say so.
cat > "$T/same_rows.py" <<'PY'
import json, sys
def load(p):
    return {(r["method"], r["task"], r["sample"]): r for r in map(json.loads, open(p)) if "method" in r}
sh, nosh, n = load(sys.argv[1]), load(sys.argv[2]), int(sys.argv[3])
assert sh.keys() == nosh.keys() and len(sh) == n, (sorted(sh), sorted(nosh))
for k, a in sh.items():
    b = nosh[k]
    assert "error" not in a and "error" not in b, (a, b)
    for f in ("answer", "score", "recall", "n_generated", "n_doc_tokens", "n_query_tokens"):
        assert a.get(f) == b.get(f), (k, f, a.get(f), b.get(f))
    if k[0] != "full":
        assert a["prefill_shared_with"] == "full", a
        ra, rb = a["refreshkv"], b["refreshkv"]
        for f in ("partial", "n_steps", "n_full", "n_partial", "layer_full"):
            assert ra[f] == rb[f], (k, f, ra[f], rb[f])
        assert a["wall_s"] >= a["shared_s"] > 0, a
        assert a["timings_s"]["feed"] == sh[("full",) + k[1:]]["timings_s"]["feed"], k
    # CPU seconds, one thread: positive, and not above the wall time (plus the clocks' slack).
    for r in (a, b):
        assert 0 < r["cpu_s"] <= 1.5 * r["wall_s"] + 0.5, (k, r["cpu_s"], r["wall_s"])
# A small partial cache really decodes differently from FULL somewhere (else the check above proves little).
assert any(r["refreshkv"]["n_partial"] > 0 for k, r in sh.items() if k[0] != "full")
PY
python3 "$T/same_rows.py" "$T/sh.jsonl" "$T/nosh.jsonl" 12 || fail "shared and separate prefills answered differently"
# A unit killed by its timeout: FULL's row says why, the RefreshKV rows that never ran say so; nothing is lost.
"$LCTX" "${SH[@]}" --samples 1 --tasks niah_single --timeout 0.01 --out "$T/to.jsonl" 2> "$T/log32" || true
[ "$(rows "$T/to.jsonl")" = 3 ] || fail "a timed-out unit left $(rows "$T/to.jsonl") rows, not 3: $(cat "$T/to.jsonl")"
# The timeout's message says what the child was doing when it was killed (docs/eval.md).
grep '"method": "full"' "$T/to.jsonl" | grep -q '"error": "timed out after 0 s (\(running\|state [A-Z]\)' ||
  fail "no timeout row for FULL with the child's state: $(cat "$T/to.jsonl")"
[ "$(grep -c '"error": "not run: the run sharing its prefill ended (timed out' "$T/to.jsonl")" = 2 ] ||
  fail "the RefreshKV rows of the timed-out unit: $(cat "$T/to.jsonl")"
"$LCTX" "${SH[@]}" --samples 1 --tasks niah_single --retry-errors --out "$T/to.jsonl" 2> "$T/log33" ||
  fail "--retry-errors failed: $(cat "$T/log33")"
[ "$(grep '"method"' "$T/to.jsonl" | grep -vc '"error"')" = 3 ] || fail "--retry-errors did not rerun the unit"

# 16. A model with sliding-window layers (a tiny random gemma3, layers 0-4 and 6 sliding over 8 tokens): RefreshKV
#     reads them densely from a cache that releases their out-of-window slots, as FULL's does, so the rows share
#     FULL's prefill too and answer as runs of their own. K = 6 is below the window.
if [ -n "$WRITE_TINY" ]; then
  "$WRITE_TINY" "$T/g3.gguf" gemma3 7
  G3=(eval -m "$T/g3.gguf" --methods full,refreshkv,refreshkv:partial=6:stride=2 --tasks niah_single,kv_list
      --lengths 600 --samples 1 --threads 1)
  "$LCTX" "${G3[@]}" --out "$T/g3.jsonl" 2> "$T/log34" || fail "gemma3 eval failed: $(cat "$T/log34")"
  "$LCTX" "${G3[@]}" --no-share-prefill --out "$T/g3no.jsonl" 2> "$T/log35" || fail "gemma3 --no-share-prefill failed"
  [ "$(grep -c '"prefill_shared_with": "full"' "$T/g3.jsonl")" = 4 ] ||
    fail "expected 4 gemma3 rows on FULL's prefill: $(cat "$T/g3.jsonl")"
  python3 "$T/same_rows.py" "$T/g3.jsonl" "$T/g3no.jsonl" 6 || fail "gemma3: shared and separate prefills differ"
fi
# 17. --jobs 2: two runs at once give the rows that one at a time gives (answers, scores, recall), each once, with
#     FULL and RefreshKV of a sample still on one prefill; a run killed midway resumes without duplicates.
#     A child stuck after its fork (see ChildRun in tools/cmd_eval.cpp) would show as a timed-out row.
J=(eval -m "$MODEL" --methods full,reform,refreshkv --tasks niah_single,vt --lengths 512 --samples 2 --threads 1
   --timeout 120)
"$LCTX" "${J[@]}" --out "$T/j1.jsonl" 2> "$T/log40" || fail "the --jobs 1 run failed: $(cat "$T/log40")"
kill_after_rows "$T/j2.jsonl" 1 "$T/log41" "${J[@]}" --jobs 2 --out "$T/j2.jsonl"
"$LCTX" "${J[@]}" --jobs 2 --out "$T/j2.jsonl" 2> "$T/log42" || fail "the --jobs 2 run failed: $(cat "$T/log42")"
[ "$(rows "$T/j2.jsonl")" = 12 ] || fail "expected 12 rows with --jobs 2, got $(rows "$T/j2.jsonl")"
[ -z "$(dups "$T/j2.jsonl")" ] || fail "--jobs 2 duplicated rows: $(dups "$T/j2.jsonl")"
grep -q '"error"' "$T/j2.jsonl" && fail "--jobs 2 left an error row: $(grep '"error"' "$T/j2.jsonl")"
# The killed run may have split a FULL+RefreshKV unit (its RefreshKV row then runs alone on resuming),
# so the prefill sharing is checked on a --jobs 2 run left alone.
"$LCTX" "${J[@]}" --jobs 2 --out "$T/j3.jsonl" 2> "$T/log44" || fail "the whole --jobs 2 run failed: $(cat "$T/log44")"
[ "$(grep -c '"prefill_shared_with": "full"' "$T/j3.jsonl")" = 4 ] || fail "--jobs 2: RefreshKV off FULL's prefill"
python3 - "$T/j1.jsonl" "$T/j2.jsonl" <<'PY' || fail "--jobs 2 answered differently from --jobs 1"
import json, sys
def load(p):
    return {(r["method"], r["task"], r["sample"]): r for r in map(json.loads, open(p)) if "method" in r}
one, two = load(sys.argv[1]), load(sys.argv[2])
assert one.keys() == two.keys() and len(one) == 12, (sorted(one), sorted(two))
for k, a in one.items():
    for f in ("answer", "score", "recall", "n_generated", "n_doc_tokens"):
        assert a.get(f) == two[k].get(f), (k, f, a.get(f), two[k].get(f))
PY
"$LCTX" eval -m "$MODEL" --jobs 0 --out "$T/j0.jsonl" 2> "$T/log43" && fail "--jobs 0 was accepted"
grep -q -- '--jobs' "$T/log43" || fail "--jobs 0: no message naming the option: $(cat "$T/log43")"
# 18. --dump-prompts writes the samples of section 1 and runs nothing; the lctx run command in each .json
#     (reform, a --probe per needle, here the answers; --no-chat --answer-prefix here, stories260K has no chat template) builds
#     the same prompt from the files: the same token count and, for as many tokens, the same answer as the row.
"$LCTX" eval -m "$MODEL" --tasks niah_single,vt --lengths 512 --samples 1 --dump-prompts "$T/dump" 2> "$T/log50" ||
  fail "--dump-prompts failed: $(cat "$T/log50")"
grep -q '2 sample(s) written' "$T/log50" || fail "--dump-prompts: no summary: $(cat "$T/log50")"
[ "$(ls "$T/dump" | wc -l)" = 6 ] || fail "--dump-prompts wrote $(ls "$T/dump")"
python3 - "$LCTX" "$T/dump" "$T/r.jsonl" <<'PY' || fail "a dumped prompt differs from the eval's"
import json, shlex, subprocess, sys
lctx, d, rows = sys.argv[1:]
rows = {r["task"]: r for r in map(json.loads, open(rows)) if r.get("method") == "reform" and r["sample"] == 0}
for task in ("niah_single", "vt"):
    meta = json.load(open(f"{d}/{task}-512-0.json"))
    row = rows[task]
    assert meta["answers"] == row["expected"], (meta["answers"], row["expected"])
    assert meta["sample_seed"] == row["sample_seed"] and meta["seed"] == row["seed"], (meta, row["sample_seed"])
    assert all(a in open(f"{d}/{task}-512-0.document.txt").read() for a in meta["answers"])
    cmd = shlex.split(meta["run"])
    assert cmd[:2] == ["lctx", "run"] and "--no-chat" in cmd and "--answer-prefix" in cmd, cmd
    out = subprocess.run([lctx] + cmd[1:] + ["--json", "-t", "1", "-n", str(row["n_generated"])],
                         capture_output=True, text=True, check=True).stdout
    got = json.loads(out)
    assert got["n_input_tokens"] + got["n_query_tokens"] == row["n_input_tokens"], (got, row["n_input_tokens"])
    assert got["answer"].strip() == row["answer"].strip(), (got["answer"], row["answer"])
    assert meta["needles"] == meta["answers"], meta
    assert [p["text"] for p in got["probes"]] == meta["needles"] and all(p["found"] for p in got["probes"])
PY
# qa's needle is the gold document's sentence with the fact asked (its answer also occurs in distractors):
# once in the document, holding an answer; its rows say "recall_of": "needles", and truncation (the first and
# last 512 tokens of 3K) does not keep a gold document at depth 0.5.
"$LCTX" eval -m "$MODEL" --tasks qa --lengths 3k --samples 1 --dump-prompts "$T/dump" 2> "$T/log52" ||
  fail "--dump-prompts qa failed: $(cat "$T/log52")"
python3 - "$T/dump" <<'PY' || fail "qa's dumped needle"
import json, sys
meta = json.load(open(f"{sys.argv[1]}/qa-3K-0.json"))
doc = open(f"{sys.argv[1]}/qa-3K-0.document.txt").read()
(needle,) = meta["needles"]
assert doc.count(needle) == 1 and any(a in needle for a in meta["answers"]), meta
assert sum(doc.count(a) for a in meta["answers"]) >= 1
PY
"$LCTX" eval -m "$MODEL" --methods truncate --tasks qa --lengths 3k --samples 1 --threads 1 --out "$T/qa.jsonl" \
  2> "$T/log53" || fail "qa eval failed: $(cat "$T/log53")"
QA=$(grep '"method": "truncate"' "$T/qa.jsonl")
echo "$QA" | grep -q '"recall_of": "needles"' || fail "a qa row without recall_of: $QA"
echo "$QA" | grep -q '"recall": 0.0000' || fail "truncation kept qa's gold fact from the middle of 3K: $QA"
echo "$QA" | grep -q '"needle_tokens": [1-9]' || fail "qa's gold fact not found in the tokens: $QA"
"$LCTX" eval -m "$MODEL" --tasks niah_single --lengths 512 --dump-prompts "$T/dump/vt-512-0.json" 2> "$T/log51" &&
  fail "--dump-prompts into a file was accepted"
grep -q 'not a directory' "$T/log51" || fail "--dump-prompts into a file: $(cat "$T/log51")"
echo "PASS" >&3
