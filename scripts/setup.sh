#!/usr/bin/env bash
# Sets up a fresh machine for building and testing lctx: system packages
# (apt), a Python venv with the reference tools (.venv), the default model,
# and a release build in build/release. Safe to run again: every step skips
# what is already done.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

need_apt=()
for pkg in cmake g++ make libgtest-dev libgmock-dev pkg-config unzip; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if ((${#need_apt[@]})); then
    echo "setup: installing ${need_apt[*]} (apt)"
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [[ ! -x .venv/bin/python ]]; then
    echo "setup: creating .venv"
    python3 -m venv .venv
fi
if ! .venv/bin/python -c "import gguf, numpy, pytest, jinja2, llama_cpp" 2>/dev/null; then
    echo "setup: installing Python reference tools (llama-cpp-python builds llama.cpp: a few minutes the first time)"
    .venv/bin/pip install --quiet --upgrade pip
    .venv/bin/pip install --quiet -r requirements-dev.txt
fi

PYTHON="$root/.venv/bin/python" bash scripts/fetch-models.sh

echo "setup: building lctx (build/release)"
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DLCTX_BUILD_TESTS=ON -DLCTX_BUILD_TOOLS=ON >/dev/null
cmake --build build/release -j"$(nproc)"
