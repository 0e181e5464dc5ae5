#!/usr/bin/env bash
# The core library must not depend on the CUDA libraries: the CUDA backend is
# a module loaded at run time (docs/backends/cuda.md). Fails when the dynamic
# section of any given library names libcudart, libcublas, libcublasLt or
# libcuda (NEEDED entries), and when readelf cannot read it.
# usage: check_no_cuda_link.sh LIBRARY...
set -uo pipefail
fail=0
for lib in "$@"; do
    if ! dyn=$(readelf -d "$lib" 2>&1); then
        echo "FAIL: readelf -d $lib: $dyn"
        fail=1
        continue
    fi
    grep -q NEEDED <<<"$dyn" || { echo "FAIL: $lib has no NEEDED entries (not a shared library?)"; fail=1; continue; }
    bad=$(grep NEEDED <<<"$dyn" | grep -E 'libcudart|libcublas|libcuda\.so|libcublasLt')
    if [[ -n $bad ]]; then
        echo "FAIL: $lib links CUDA libraries:"
        echo "$bad"
        fail=1
    else
        echo "ok: $lib needs $(grep NEEDED <<<"$dyn" | sed -E 's/.*\[(.*)\]/\1/' | tr '\n' ' ')"
    fi
done
exit $fail
