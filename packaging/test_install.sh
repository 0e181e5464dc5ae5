#!/usr/bin/env bash
# Packs the build with CPack (tar.gz and, when dpkg-deb exists, .deb),
# unpacks each into a temporary prefix and builds and runs the C example
# against it twice: with pkg-config and with CMake's find_package.
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
    # pkg-config, relocated to where the package was unpacked
    flags="$(PKG_CONFIG_PATH="$pcdir" pkg-config --define-prefix --cflags --libs lctx)"
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
echo "1 passed, 0 failed"
