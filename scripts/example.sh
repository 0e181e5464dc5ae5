#!/usr/bin/env bash
# The main job: sets everything up (scripts/setup.sh), then answers a question
# about a long document with REFORM on the default model (SmolLM2-135M,
# trained on 8K tokens).
#
#   scripts/example.sh                      a ~120K-token document with a hidden
#                                           magic number, and the question for it
#   scripts/example.sh DOC.txt "QUESTION"   your own document and question
#
# Progress of the encoding goes to stderr; the answer to stdout. About 3
# minutes for 120K tokens on 2 cores.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh >&2
model=models/SmolLM2-135M-Instruct.Q4_1.gguf

if (($# >= 2)); then
    doc="$1"
    question="$2"
    [[ -f "$doc" ]] || { echo "example: no such file: $doc" >&2; exit 2; }
elif (($# == 0)); then
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    doc="$tmp/document.txt"
    # Shuffled Python standard library docstrings with one needle sentence at
    # 40% depth (bench/needle_data.py, the same generator as the needle table).
    question="$(.venv/bin/python - "$doc" <<'PY'
import sys
sys.path.insert(0, "bench")
import needle_data
doc, needle, key, value = needle_data.make_doc(n_chars=500_000, depth=0.4, seed=2026)
open(sys.argv[1], "w").write(doc)
print(f"example: {len(doc)} characters; hidden: \"{needle}\"", file=sys.stderr)
print(needle_data.question(key))
PY
)"
else
    echo "usage: scripts/example.sh [DOC.txt \"QUESTION\"]" >&2
    exit 2
fi

echo "example: question: $question" >&2
./build/release/tools/lctx run -m "$model" --method reform --file "$doc" --question "$question" -n 48 --progress
