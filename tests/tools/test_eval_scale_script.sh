#!/usr/bin/env bash
# scripts/eval-scale.sh, the commands of the evaluation at scale: every stage
# prints its commands with --dry-run; each `lctx eval` command names only
# methods and tasks that this lctx's `eval --help` lists; a stage that would
# run needs the binary; an unknown stage is refused.
# usage: test_eval_scale_script.sh LCTX SOURCE_DIR
set -uo pipefail
LCTX=$1
SRC=$2
SCRIPT=$SRC/scripts/eval-scale.sh
failures=0 passed=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { passed=$((passed + 1)); }

help=$("$LCTX" eval --help 2>&1)
# The method names: the first word of the indented lines of --methods' list, and the eval-only ones.
methods=$(printf '%s\n' "$help" | sed -n '/--methods/,/--oracle-tokens/p' | awk '$1 ~ /^[a-z0-9]+$/ && NF > 1 {print $1}')
methods="$methods oracle"
tasks=$(printf '%s\n' "$help" | sed -n 's/.*--tasks LIST.*all): //p' | tr -d ' ' | tr ',' ' ')
[ -n "$tasks" ] || fail "no task list in lctx eval --help"

n_eval=0
for stage in smollm2-8k smollm2-32k smollm2-128k smollm2-long gemma3-8k gemma3-32k gemma3-128k gemma3-long report plan; do
    out=$(LCTX="$LCTX" ESSAYS=/essays bash "$SCRIPT" --dry-run "$stage" 2>&1)
    rc=$?
    [ $rc -eq 0 ] || { fail "$stage --dry-run exited $rc: $out"; continue; }
    [ -n "$out" ] || { fail "$stage printed no command"; continue; }
    ok
    while read -r line; do
        case $line in *" eval -m "*) ;; *) continue ;; esac
        n_eval=$((n_eval + 1))
        m=$(printf '%s\n' "$line" | sed -n 's/.*--methods \([^ ]*\).*/\1/p')
        t=$(printf '%s\n' "$line" | sed -n 's/.*--tasks \([^ ]*\).*/\1/p')
        for name in ${m//,/ }; do
            base=${name%%:*}
            case " $(echo $methods) " in *" $base "*) ok ;; *) fail "$stage: method '$base' is not in lctx eval --help" ;; esac
        done
        for name in ${t//,/ }; do
            case " $tasks " in *" $name "*) ok ;; *) fail "$stage: task '$name' is not in lctx eval --help" ;; esac
        done
        case $line in *"--essays /essays"*) ok ;; *) fail "$stage: ESSAYS not passed on: $line" ;; esac
        for flag in $(printf '%s\n' "$line" | grep -o -- ' --[a-z-]*' ); do
            case $help in *"$flag "*) ok ;; *) fail "$stage: option $flag is not in lctx eval --help" ;; esac
        done
    done <<< "$out"
done
[ "$n_eval" -ge 10 ] || fail "only $n_eval lctx eval commands in all stages"

# JOBS: runs at once, passed on as --jobs; THREADS as -t, by default the cores shared among the JOBS.
out=$(LCTX="$LCTX" ESSAYS=/essays JOBS=3 THREADS=2 bash "$SCRIPT" --dry-run smollm2-32k 2>&1)
case $out in *" -t 2 --jobs 3 "*) ok ;; *) fail "JOBS=3 THREADS=2 not passed on: $out" ;; esac
out=$(LCTX="$LCTX" ESSAYS=/essays JOBS=$(( $(nproc) + 1 )) bash "$SCRIPT" --dry-run smollm2-32k 2>&1)
case $out in *" -t 1 --jobs "*) ok ;; *) fail "more JOBS than cores: not one thread a run: $out" ;; esac

# Past 128K the oracle, REFORM and ILRe run 3 samples; the baselines and InfLLM the first of those 3 (their rows
# pair with the others' sample 0), and the plan prices them so.
for stage in smollm2-long gemma3-long; do
    out=$(LCTX="$LCTX" ESSAYS=/essays bash "$SCRIPT" --dry-run "$stage" 2>&1)
    while read -r line; do
        m=$(printf '%s\n' "$line" | sed -n 's/.*--methods \([^ ]*\).*/\1/p')
        case $m in
        *oracle*|*reform*|*ilre*)
            case $line in *" --samples 3 "*) ;; *) fail "$stage: $m without --samples 3: $line" ;; esac
            case $line in *--first-samples*) fail "$stage: $m limited by --first-samples: $line" ;; *) ok ;; esac ;;
        *streaming*infllm*)
            case $line in *" --samples 3 --first-samples 1 "*) ok ;; *) fail "$stage: the baselines not on sample 0 of 3: $line" ;; esac ;;
        *) fail "$stage: unexpected methods '$m': $line" ;;
        esac
    done <<< "$(printf '%s\n' "$out" | grep ' eval -m ')"
done
out=$(LCTX="$LCTX" bash "$SCRIPT" --dry-run plan 2>&1)
for want in "--methods oracle,reform,ilre --tasks [a-z_,]* --lengths 512k:3,1m:3 " \
            "--methods truncate,[a-z0-9,]*infllm --tasks [a-z_,]* --lengths 512k:1,1m:1 "; do
    [ "$(printf '%s\n' "$out" | grep -c -- "$want")" = 2 ] && ok || fail "plan: not twice '$want': $out"
done
# Gemma 3's REFORM with a 4K recompute budget at 512K and 1M: run after REFORM and before the baselines, and priced.
out=$(LCTX="$LCTX" ESSAYS=/essays bash "$SCRIPT" --dry-run gemma3-long 2>&1 | grep ' eval -m ' | sed -n 's/.*--methods \([^ ]*\) .*--lengths \([^ ]*\) .*/\1@\2/p' | tr '\n' ' ')
[ "$out" = "oracle,ilre@512k,1m reform@512k,1m reform:recompute=4096@512k,1m truncate,streaming,h2o,tova,snapkv,infinipot,infllm@512k,1m " ] \
    && ok || fail "gemma3-long: runs out of order: $out"
out=$(LCTX="$LCTX" ESSAYS=/essays bash "$SCRIPT" --dry-run smollm2-long 2>&1 | grep -c 'recompute=')
[ "$out" = 0 ] && ok || fail "smollm2-long runs a REFORM variant"
out=$(LCTX="$LCTX" bash "$SCRIPT" --dry-run plan 2>&1)
[ "$(printf '%s\n' "$out" | grep -c -- "eval-scale-gemma3.jsonl .*--methods reform:recompute=4096 --tasks [a-z_,]* --lengths 512k:3,1m:3 ")" = 1 ] \
    && ok || fail "plan: Gemma's 4K-recompute REFORM at 512K and 1M not priced: $out"

# report: the paired comparisons of each file, against the oracle, at the lengths of its design, and its summary.
out=$(LCTX="$LCTX" bash "$SCRIPT" --dry-run report 2>&1)
LENGTHS="8k 32k 128k 512k 1m"   # the design's lengths, both models: one paired section and summary column each
want=$(wc -w <<< "$LENGTHS")
for f in smollm2 gemma3; do
    n=$(printf '%s\n' "$out" | grep -c "bench/eval_paired.py docs/results/eval-scale-$f.jsonl --length [0-9]*[km] --methods oracle,[^ ]* --against oracle >> docs/results/eval-scale-$f-paired.md")
    [ "$n" = "$want" ] && ok || fail "report: $n paired sections for $f, not $want: $out"
    # One section per length: a second section at a length would repeat pairs of the first.
    for L in $LENGTHS; do
        n=$(printf '%s\n' "$out" | grep "bench/eval_paired.py docs/results/eval-scale-$f.jsonl --length $L " | grep -v -c -- "--first-values")
        [ "$n" = 1 ] && ok || fail "report: $n paired sections for $f at $L, not 1: $out"
    done
    # The long lengths scored strictly too (number needles: only the answer's first numbers count).
    for L in 128k 512k 1m; do
        n=$(printf '%s\n' "$out" | grep -c "bench/eval_paired.py docs/results/eval-scale-$f.jsonl --length $L --methods oracle,reform,ilre[^ ]* --against oracle --first-values >> docs/results/eval-scale-$f-paired.md")
        [ "$n" = 1 ] && ok || fail "report: $n strict paired sections for $f at $L, not 1: $out"
    done
    # The summary table of the model: its columns are the paired sections' (the same lengths and methods).
    n=$(printf '%s\n' "$out" | grep -c "bench/eval_summary.py docs/results/eval-scale-$f.jsonl --replace-in docs/results/eval-scale.md --marker $f-summary\( --column [0-9]*[km]=oracle,[^ ]*\)\{$want\}$")
    [ "$n" = 1 ] && ok || fail "report: $n summary tables for $f, not 1 with $want columns: $out"
    # ... one column per length in it and in its strict twin, as one paired section per length.
    for marker in "$f-summary " "$f-summary-strict "; do
        line=$(printf '%s\n' "$out" | grep "bench/eval_summary.py docs/results/eval-scale-$f.jsonl .*--marker $marker")
        for L in $LENGTHS; do
            n=$(printf '%s\n' "$line" | grep -o -- "--column $L=" | wc -l)
            [ "$n" = 1 ] && ok || fail "report: $n columns at $L in the table of marker $marker, not 1: $line"
        done
    done
    # ... and the same table read strictly, into its own markers.
    n=$(printf '%s\n' "$out" | grep -c "bench/eval_summary.py docs/results/eval-scale-$f.jsonl --replace-in docs/results/eval-scale.md --marker $f-summary-strict --first-values\( --column [0-9]*[km]=oracle,[^ ]*\)\{$want\}$")
    [ "$n" = 1 ] && ok || fail "report: $n strict summary tables for $f, not 1 with $want columns: $out"
    for m in begin end; do
        [ "$(grep -c "^<!-- $f-summary-strict $m -->$" "$SRC/docs/results/eval-scale.md")" = 1 ] && ok || fail "no '$f-summary-strict $m' marker"
    done
done
# Gemma 3's REFORM at a 4K budget is complete at 512K and 1M (the thirty-third session): a column of both
# lengths' summaries, read either way, and of their strict paired sections.
for L in 512k 1m; do
    n=$(printf '%s\n' "$out" | grep "bench/eval_summary.py docs/results/eval-scale-gemma3.jsonl " | grep -c -- "--column $L=oracle,reform,ilre,reform:recompute=4096\( \|$\)")
    [ "$n" = 2 ] && ok || fail "report: Gemma 3's summaries have the 4K variant at $L in $n tables, not 2: $out"
    n=$(printf '%s\n' "$out" | grep -c "bench/eval_paired.py docs/results/eval-scale-gemma3.jsonl --length $L --methods oracle,reform,ilre,reform:recompute=4096 --against oracle --first-values ")
    [ "$n" = 1 ] && ok || fail "report: no strict paired section with the 4K variant at $L: $out"
    # The one paired section at each of these lengths holds the variant.
    n=$(printf '%s\n' "$out" | grep -c "bench/eval_paired.py docs/results/eval-scale-gemma3.jsonl --length $L --methods oracle,reform,ilre,reform:recompute=4096 --against oracle >> ")
    [ "$n" = 1 ] && ok || fail "report: Gemma 3's paired section at $L lacks the 4K variant: $out"
done
# The count of Gemma 3's runs of digits ("1000..."): every method of the Gemma run, the niah tasks, into its markers.
n=$(printf '%s\n' "$out" | grep -c "bench/eval_answers.py docs/results/eval-scale-gemma3.jsonl --pattern \[0-9\]{20,} --tasks niah_single,niah_multikey,niah_multivalue,niah_multiquery --methods oracle,[^ ]*infllm,reform:recompute=4096 --replace-in docs/results/eval-scale.md --marker gemma3-answer-runs$")
[ "$n" = 1 ] && ok || fail "report: $n answer-run counts, not 1: $out"
for m in begin end; do
    [ "$(grep -c "^<!-- gemma3-answer-runs $m -->$" "$SRC/docs/results/eval-scale.md")" = 1 ] && ok || fail "no 'gemma3-answer-runs $m' marker"
done
# Each summary's markers are in eval-scale.md, once.
for f in smollm2 gemma3; do
    for m in begin end; do
        [ "$(grep -c "^<!-- $f-summary $m -->$" "$SRC/docs/results/eval-scale.md")" = 1 ] && ok || fail "no '$f-summary $m' marker"
    done
done
# The rows done of each model's plan: one table each, into its markers, counted with exactly the grids
# that `plan` prices (the same methods, tasks and lengths, in the same order).
plan_out=$(LCTX="$LCTX" bash "$SCRIPT" --dry-run plan 2>&1)
for f in smollm2 gemma3; do
    line=$(printf '%s\n' "$out" | grep "bench/eval_progress.py docs/results/eval-scale-$f.jsonl --replace-in docs/results/eval-scale.md --marker $f-progress --grid ")
    [ "$(printf '%s\n' "$line" | grep -c .)" = 1 ] && ok || fail "report: not one progress table for $f: $out"
    grids=$(printf '%s\n' "$line" | sed 's/.* --marker [^ ]* //; s/--grid //g' | tr ' ' '\n' | grep .)
    planned=$(printf '%s\n' "$plan_out" | grep "bench/eval_plan.py docs/results/eval-scale-$f.jsonl " \
        | sed 's/.*--methods \([^ ]*\) --tasks \([^ ]*\) --lengths \([^ ]*\) .*/\1 \2 \3/' | tr ' ' '\n')
    [ -n "$grids" ] && [ "$grids" = "$planned" ] && ok || fail "report: $f's progress grids are not the plan's: '$grids' against '$planned'"
    for m in begin end; do
        [ "$(grep -c "^<!-- $f-progress $m -->$" "$SRC/docs/results/eval-scale.md")" = 1 ] && ok || fail "no '$f-progress $m' marker"
    done
    # What the rest costs: one table each, into its markers, with the plan's grids and the files that lend
    # the plan its times, priced on the plan's 2 cores from every CPU's rows and from the AMD EPYC's.
    line=$(printf '%s\n' "$out" | grep "bench/eval_cost.py docs/results/eval-scale-$f.jsonl ")
    [ "$(printf '%s\n' "$line" | grep -c .)" = 1 ] && ok || fail "report: not one cost table for $f: $out"
    printf '%s\n' "$line" | grep -q -- " --cores 2 --backend cpu --price every CPU's rows= --price the AMD EPYC's rows (family 25)=family 25 --replace-in docs/results/eval-scale.md --marker $f-cost --grid " \
        && ok || fail "report: $f's cost table is not priced both ways on 2 cores into its markers: $line"
    grids=$(printf '%s\n' "$line" | sed 's/.* --marker [^ ]* //; s/--grid //g' | tr ' ' '\n' | grep .)
    [ -n "$grids" ] && [ "$grids" = "$planned" ] && ok || fail "report: $f's cost grids are not the plan's: '$grids' against '$planned'"
    older=$(printf '%s\n' "$line" | sed "s/.*eval_cost.py docs\/results\/eval-scale-$f.jsonl \(.*\) --cores .*/\1/")
    for p in $(printf '%s\n' "$plan_out" | grep "bench/eval_plan.py docs/results/eval-scale-$f.jsonl " \
                   | sed 's/.*eval_plan.py [^ ]* //; s/ --methods.*//' | tr ' ' '\n' | sort -u); do
        case " $older " in *" $p "*) ok ;; *) fail "report: $f's cost table lacks the plan's older file $p: $line" ;; esac
    done
    for m in begin end; do
        [ "$(grep -c "^<!-- $f-cost $m -->$" "$SRC/docs/results/eval-scale.md")" = 1 ] && ok || fail "no '$f-cost $m' marker"
    done
done

# A stage that runs needs the binary, and says so.
out=$(LCTX=/nonexistent/lctx ESSAYS=/tmp bash "$SCRIPT" smollm2-32k 2>&1)
rc=$?
if [ $rc -ne 0 ] && printf '%s' "$out" | grep -q "no /nonexistent/lctx"; then ok; else fail "missing binary: rc $rc, '$out'"; fi

# An unknown stage is refused before any stage runs.
out=$(LCTX="$LCTX" bash "$SCRIPT" --dry-run smollm2-32k bogus 2>&1)
rc=$?
if [ $rc -eq 2 ] && printf '%s' "$out" | grep -q "unknown stage 'bogus'" && ! printf '%s' "$out" | grep -q "^+ "; then
    ok
else
    fail "unknown stage: rc $rc, '$out'"
fi
# No stage: the usage, exit 2.
out=$(bash "$SCRIPT" 2>&1)
rc=$?
if [ $rc -eq 2 ] && printf '%s' "$out" | grep -q "Stages:"; then ok; else fail "no stage: rc $rc"; fi

# NICE reaches the session's scheduling group (Linux autogroup) when the script leads its session
# (started with setsid), and only then: a stand-in lctx records the group it ran in.
if [ -r /proc/self/autogroup ] && command -v setsid > /dev/null; then
    stub_dir=$(mktemp -d)
    printf '#!/usr/bin/env bash\ncat /proc/self/autogroup > "$STUB_OUT"\n' > "$stub_dir/lctx"
    chmod +x "$stub_dir/lctx"
    STUB_OUT=$stub_dir/own NICE=17 LCTX=$stub_dir/lctx ESSAYS=$stub_dir setsid bash "$SCRIPT" smollm2-32k \
        > /dev/null 2>&1 < /dev/null
    case $(cat "$stub_dir/own" 2>/dev/null) in *" nice 17") ok ;; *) fail "setsid run: group $(cat "$stub_dir/own" 2>&1), not nice 17" ;; esac
    before=$(cat /proc/self/autogroup)
    STUB_OUT=$stub_dir/shared NICE=17 LCTX=$stub_dir/lctx ESSAYS=$stub_dir bash "$SCRIPT" smollm2-32k > /dev/null 2>&1
    case $(cat "$stub_dir/shared" 2>/dev/null) in "$before") ok ;; *) fail "run inside this session changed its group: $(cat "$stub_dir/shared" 2>&1), was $before" ;; esac
    rm -rf "$stub_dir"
else
    echo "note: no /proc/self/autogroup or setsid here; the session niceness check did not run"
fi

echo "$passed checks passed, $failures failed ($n_eval lctx eval commands)"
[ "$failures" -eq 0 ]
