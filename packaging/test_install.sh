#!/usr/bin/env bash
# Packs the build with CPack (tar.gz and, when dpkg-deb exists, .deb),
# unpacks each into a temporary prefix and builds and runs the C example
# against it twice: with pkg-config and with CMake's find_package. Then
# `cmake --install --prefix P`, P moved to Q, and the example built with
# pkg-config from Q alone: lctx.pc must be relocatable (prefix from
# ${pcfiledir}), and the program must run on Q's library, not the build tree's.
# When the CUDA module was built: it is installed beside liblctx.so, and the
# installed library (a find_package program) and the installed `lctx` find it
# there: without a device their fallback line names Q's module file.
# usage: packaging/test_install.sh BUILD_DIR
set -euo pipefail
build="$(cd "$1" && pwd)"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tiny="${LCTX_TINY_MODEL:-$root/tests/data/stories260K.gguf}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
printf 'Lily had a red ball. She played with it in the park.\n' > "$tmp/doc.txt"

(cd "$build" && cpack -G TGZ -B "$tmp/pkg" >/dev/null)
tarball="$(ls "$tmp"/pkg/*.tar.gz)"
roots=("$tmp/tgz")
mkdir -p "$tmp/tgz"
tar -xzf "$tarball" -C "$tmp/tgz" --strip-components=1
if command -v dpkg-deb >/dev/null; then
    (cd "$build" && cpack -G DEB -B "$tmp/pkg" >/dev/null)
    deb="$(ls "$tmp"/pkg/*.deb)"
    dpkg-deb -x "$deb" "$tmp/deb"
    roots+=("$tmp/deb")
    dpkg-deb -c "$deb" | grep 'include/lctx.h' >/dev/null
fi

for r in "${roots[@]}"; do
    header="$(find "$r" -path '*/include/lctx.h' | head -n1)"
    prefix="$(dirname "$(dirname "$header")")"
    libdir="$(dirname "$(find "$prefix" -name 'liblctx.so' | head -n1)")"
    test -f "$prefix/include/lctx.h"
    pcdir="$(dirname "$(find "$prefix" -name lctx.pc | head -n1)")"
    # pkg-config from where the package was unpacked (no --define-prefix: lctx.pc relocates itself)
    flags="$(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs lctx)"
    inc="$(PKG_CONFIG_PATH="$pcdir" pkg-config --variable=includedir lctx)"
    [[ -d "$inc" && "$(cd "$inc" && pwd -P)" == "$(cd "$prefix/include" && pwd -P)" ]] ||
        { echo "FAIL: lctx.pc of $(basename "$r") gives includedir '$inc', not $prefix/include"; exit 1; }
    cc -std=c99 -Wall -Werror "$root/examples/c/ask.c" $flags -Wl,-rpath,"$libdir" -o "$tmp/ask_pc"
    # find_package
    cmake -S "$root/packaging/consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
        -DEXAMPLE_SOURCE="$root/examples/c/ask.c" -DCMAKE_BUILD_RPATH="$libdir" >/dev/null
    cmake --build "$tmp/consumer" >/dev/null
    if [[ -f "$tiny" ]]; then
        a="$("$tmp/ask_pc" "$tiny" "$tmp/doc.txt" "Lily" 12)"
        b="$("$tmp/consumer/ask" "$tiny" "$tmp/doc.txt" "Lily" 12)"
        [[ -n "$a" && "$a" == "$b" ]] || { echo "examples disagree: '$a' vs '$b'"; exit 1; }
    fi
    rm -rf "$tmp/consumer" "$tmp/ask_pc"
    echo "packaging: $(basename "$r") unpacked at ${prefix#$r}: pkg-config and find_package builds ok"
done
# cmake --install to P, moved to Q: lctx.pc from Q, the program linked and run on Q's library.
cmake --install "$build" --prefix "$tmp/p" >/dev/null
mv "$tmp/p" "$tmp/q"
pc="$(find "$tmp/q" -name lctx.pc | head -n1)"
[[ -n "$pc" ]] || { echo "FAIL: cmake --install put no lctx.pc"; exit 1; }
if grep -q "$tmp/p" "$pc"; then echo "FAIL: lctx.pc names the install prefix:"; cat "$pc"; exit 1; fi
grep -q '^prefix=${pcfiledir}/' "$pc" || { echo "FAIL: lctx.pc's prefix is not relative to \${pcfiledir}:"; cat "$pc"; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc")"
flags="$(pkg-config --cflags --libs lctx)"
libdir="$(pkg-config --variable=libdir lctx)"
incdir="$(pkg-config --variable=includedir lctx)"
[[ -f "$incdir/lctx.h" && -e "$libdir/liblctx.so" ]] ||
    { echo "FAIL: pkg-config points at '$incdir' and '$libdir', not into $tmp/q:"; cat "$pc"; exit 1; }
[[ "$(cd "$libdir" && pwd -P)" == "$(cd "$tmp/q" && pwd -P)"/* ]] || { echo "FAIL: libdir $libdir is outside $tmp/q"; exit 1; }
mkdir -p "$tmp/app"
cp "$root/examples/c/ask.c" "$tmp/app/ask.c"
(cd "$tmp/app" && env -u LIBRARY_PATH -u CPATH -u C_INCLUDE_PATH cc -std=c99 -Wall -Werror ask.c $flags \
    -Wl,-rpath,"$libdir" -o ask)
loaded="$(cd "$tmp/app" && env -u LD_LIBRARY_PATH LD_TRACE_LOADED_OBJECTS=1 ./ask | grep 'liblctx\.so')"
[[ "$loaded" == *"$libdir/liblctx.so"* ]] || { echo "FAIL: ask loads '$loaded', not $libdir's liblctx"; exit 1; }
if [[ -f "$tiny" ]]; then
    a="$(cd "$tmp/app" && env -u LD_LIBRARY_PATH ./ask "$tiny" "$tmp/doc.txt" "Lily" 12)"
    [[ -n "$a" ]] || { echo "FAIL: the relocated install's example printed nothing"; exit 1; }
fi
unset PKG_CONFIG_PATH
echo "packaging: cmake --install moved from p/ to q/: pkg-config build ok, runs on q's library"

if [[ -f "$build/liblctx-cuda.so" ]]; then
    module="$(cd "$libdir" && pwd -P)/liblctx-cuda.so"
    [[ -f "$module" ]] || { echo "FAIL: the CUDA module was built but not installed as $module"; exit 1; }
    cmake -S "$root/packaging/consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/q" \
        -DEXAMPLE_SOURCE="$root/examples/c/ask.c" -DCMAKE_BUILD_RPATH="$libdir" >/dev/null
    cmake --build "$tmp/consumer" >/dev/null
    out="$(env -u LCTX_BACKEND_PATH -u LCTX_BACKEND -u LD_LIBRARY_PATH "$tmp/consumer/backend_probe" "$tiny" cuda)"
    cli="$(env -u LCTX_BACKEND_PATH -u LCTX_BACKEND -u LD_LIBRARY_PATH "$tmp/q/bin/lctx" bench -m "$tiny" -p 32 \
        --decode-ctx 0 -r 1 -t 1 --backend cuda 2>&1)"
    if [[ "$out" == *"backends: cpu"*"cuda (score "* ]]; then
        # a device here: the module from q/ ran
        [[ "$cli" == *'"backend": "cuda"'* ]] || { echo "FAIL: q/bin/lctx did not run the CUDA module: $cli"; exit 1; }
        echo "packaging: the CUDA module installed beside liblctx.so runs (a device is present)"
    else
        line="backend 'cuda' is not available on this machine (module $module: cannot run on this machine (no device or driver)); using the CPU"
        [[ "$out" == *"$line"* ]] || { echo "FAIL: the installed library did not log '$line':"; echo "$out"; exit 1; }
        [[ "$cli" == *"$line"* && "$cli" == *'"backend": "cpu"'* ]] ||
            { echo "FAIL: q/bin/lctx bench --backend cuda did not fall back naming $module:"; echo "$cli"; exit 1; }
        echo "packaging: the installed library and q/bin/lctx find q's liblctx-cuda.so (no device: CPU fallback logged)"
    fi
fi
echo "1 passed, 0 failed"
