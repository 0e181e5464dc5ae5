#!/usr/bin/env bash
# Layering checks that the include views (CMakeLists.txt, tests/layering)
# cannot make on their own:
#  1. nothing in src/ outside src/backend includes "kernels/..." or uses the
#     lctx::cpu namespace: the layers above the backend reach the CPU kernels
#     only through the Backend interface;
#  2. kernels/ does not include "model/..." (shared types are in src/common);
#  3. no #include climbs out of its directory with "../" (that would get
#     around the include views);
#  4. every .cpp under src/, kernels/ and tools/ is in a source list (the
#     lists are explicit: a file in none would silently not be built).
# usage: check_layers.sh [REPO_ROOT]
set -uo pipefail
root="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
cd "$root" || exit 2
fail=0
bad() { echo "FAIL: $1"; printf '  %s\n' "${@:2}"; fail=1; }

# Code lines only: drop // comment lines from grep -n output (file:line:text).
code() { grep -Ev '^[^:]+:[0-9]+:[[:space:]]*//'; }
above=()   # every directory of src/ but the backend
for d in src/*/; do d=${d%/}; [[ $d == src/backend ]] || above+=("$d"); done

hits=$(grep -rn --include='*.cpp' --include='*.h' '#[[:space:]]*include[[:space:]]*"kernels/' "${above[@]}" | code)
[[ -z $hits ]] || bad 'includes of kernels/ outside src/backend:' "$hits"
hits=$(grep -rn --include='*.cpp' --include='*.h' 'cpu::' "${above[@]}" | code)
[[ -z $hits ]] || bad 'cpu:: used outside src/backend:' "$hits"
hits=$(grep -rn --include='*.cpp' --include='*.h' '#[[:space:]]*include[[:space:]]*"model/' kernels | code)
[[ -z $hits ]] || bad 'kernels/ includes model/:' "$hits"
hits=$(grep -rnE --include='*.cpp' --include='*.h' '#[[:space:]]*include[[:space:]]*"(\.\./|[^"]*/\.\./)' src kernels tools | code)
[[ -z $hits ]] || bad 'includes with "../":' "$hits"

missing=()
while IFS= read -r f; do
    grep -Eq "(^|[[:space:]])${f//./\\.}([[:space:])]|$)" CMakeLists.txt || missing+=("$f (CMakeLists.txt)")
done < <(find src kernels -name '*.cpp' | sort)
while IFS= read -r f; do
    n=${f#tools/}
    grep -Eq "(^|[[:space:]])${n//./\\.}([[:space:])]|$)" tools/CMakeLists.txt || missing+=("$f (tools/CMakeLists.txt)")
done < <(find tools -name '*.cpp' | sort)
((${#missing[@]} == 0)) || bad 'sources in no source list (add them to the list of their layer):' "${missing[@]}"

if ((fail)); then exit 1; fi
echo "check_layers: ok (${above[*]} checked; $(find src kernels tools -name '*.cpp' | wc -l) sources, all listed)"
