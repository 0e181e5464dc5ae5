#!/usr/bin/env bash
# The main job: sets everything up (scripts/setup.sh) and answers a question
# with the default model. Usage: scripts/example.sh ["question"]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh >&2
question="${1:-What is the capital of France? Answer in one sentence.}"
./build/release/tools/lctx generate -m models/SmolLM2-135M-Instruct.Q4_1.gguf --chat -n 96 -p "$question"
