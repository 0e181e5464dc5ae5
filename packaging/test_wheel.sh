#!/usr/bin/env bash
# Builds the Python wheel with `pip wheel bindings/python` (scikit-build-core
# from PyPI builds the C++ core and the SWIG module), checks its contents,
# installs it into a fresh venv and runs a smoke test outside the source tree.
# A wheel built with the CUDA module (nvcc found) carries lctx/liblctx-cuda.so
# beside lctx/liblctx.so.0; a session asked for "cuda" must find it there (no
# device: the fallback line names that file). CMAKE_ARGS reaches the wheel's
# CMake (e.g. -DCMAKE_CUDA_ARCHITECTURES=90-real for a quicker test build).
# usage: test_wheel.sh [BUILD_CACHE_DIR]   (the CMake build dir is kept there
# between runs, so a rebuild takes seconds). Skips (exit 0) with a message
# when PyPI cannot be reached; LCTX_SKIP_WHEEL=1 skips it too.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${1:-$root/build/wheel}"
python="${PYTHON:-python3}"
model="${LCTX_TINY_MODEL:-$root/tests/data/stories260K.gguf}"
if [[ "${LCTX_SKIP_WHEEL:-0}" == 1 ]]; then echo "test_wheel: SKIPPED (LCTX_SKIP_WHEEL=1)"; exit 0; fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$python" -m venv "$tmp/venv"
pip=("$tmp/venv/bin/pip" --disable-pip-version-check -q)
# Reachability of the package index, through pip and its configuration.
if ! timeout 60 "${pip[@]}" download --no-deps -d "$tmp/probe" "scikit-build-core>=0.8" >/dev/null 2>&1; then
    echo "test_wheel: SKIPPED: PyPI (scikit-build-core) is not reachable from pip"
    exit 0
fi
mkdir -p "$cache"
echo "test_wheel: building the wheel (build dir $cache)"
if ! CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" timeout 900 "${pip[@]}" wheel --no-deps -w "$tmp/dist" \
        --config-settings=build-dir="$cache" "$root/bindings/python" >"$tmp/build.log" 2>&1; then
    tail -40 "$tmp/build.log"
    echo "test_wheel: FAILED to build the wheel" >&2
    exit 1
fi
wheel="$(ls "$tmp"/dist/lctx-*.whl)"
# the wheel's CMake built the CUDA module: then the wheel must carry it
cuda_built=0
grep -q '^LCTX_CUDA:BOOL=ON$' "$cache/CMakeCache.txt" 2>/dev/null && cuda_built=1
"$python" - "$wheel" "$cuda_built" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
need = ["lctx/__init__.py", "lctx/capi.py", "lctx/liblctx.so.0"]
if sys.argv[2] == "1":
    need.append("lctx/liblctx-cuda.so")
missing = [n for n in need if n not in names]
if not any(n.startswith("lctx/_capi") and n.endswith(".so") for n in names):
    missing.append("lctx/_capi*.so (the SWIG module)")
stray = [n for n in names if not (n.startswith("lctx/") or ".dist-info/" in n)]
if missing or stray:
    sys.exit(f"test_wheel: missing {missing}, outside the package {stray}")
print(f"test_wheel: {sys.argv[1].rsplit('/', 1)[-1]}: {len(names)} files")
PY
"${pip[@]}" install --no-index --no-deps "$wheel"
# Run from $tmp so that the source tree's bindings/python/lctx is not imported.
(cd "$tmp" && "$tmp/venv/bin/python" - "$model" <<'PY'
import os, sys
import lctx
assert os.path.dirname(lctx.__file__).startswith(sys.prefix), lctx.__file__
print("test_wheel: lctx", lctx.version(), "from", os.path.dirname(lctx.__file__))
if not os.path.exists(sys.argv[1]):
    print("test_wheel: tiny model absent, smoke test limited to the import")
    sys.exit(0)
pkg = os.path.dirname(lctx.__file__)
module = os.path.join(pkg, "liblctx-cuda.so")
lines = []
lctx.set_log_handler(lambda level, message: lines.append(message), lctx.LogLevel.INFO)
os.environ.pop("LCTX_BACKEND_PATH", None)
os.environ["LCTX_BACKEND"] = "cuda"
with lctx.Model(sys.argv[1]) as m, m.session(n_threads=1) as s:
    pass
del os.environ["LCTX_BACKEND"]
if os.path.exists(module):
    fallback = [l for l in lines if l.startswith("backend 'cuda' is not available")]
    if fallback:
        want = (f"backend 'cuda' is not available on this machine (module {module}: cannot run on this machine "
                "(no device or driver)); using the CPU")
        assert fallback == [want], f"the fallback line does not name the wheel's module: {fallback}"
        print("test_wheel: liblctx-cuda.so found in the wheel beside liblctx.so.0 (no device: CPU fallback logged)")
    else:
        print("test_wheel: liblctx-cuda.so found in the wheel and running (a device is present)")
else:
    print("test_wheel: no CUDA module in this wheel")
lctx.set_log_handler(None)
with lctx.Model(sys.argv[1]) as m, m.session(n_threads=1) as s:
    s.feed("Once upon a time, there was a little girl named Lily. She loved to play outside.")
    answer = s.ask(" Lily", max_tokens=8)
assert isinstance(answer, str) and answer, repr(answer)
try:
    lctx.Model("/nonexistent.gguf")
    raise SystemExit("no error for a missing file")
except lctx.IoError:
    pass
print("test_wheel: smoke test passed:", repr(answer))
PY
)
