#!/usr/bin/env bash
# Checks packaging/pom.xml: well-formed XML, org.lctx:lctx:jar at the version
# of project() in CMakeLists.txt, junit-jupiter its only (test-scope)
# dependency; and, where mvn is installed, that Maven accepts the model
# offline (`mvn -o validate` needs no plugins).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pom="$root/packaging/pom.xml"
version="$(sed -n 's/^project(lctx VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")"
[[ -n "$version" ]] || { echo "test_pom: no project version in CMakeLists.txt" >&2; exit 1; }
python3 - "$pom" "$version" <<'PY'
import sys
import xml.etree.ElementTree as ET
ns = {"m": "http://maven.apache.org/POM/4.0.0"}
root = ET.parse(sys.argv[1]).getroot()
get = lambda path: (root.findtext(path, namespaces=ns) or "").strip()
want = {"m:modelVersion": "4.0.0", "m:groupId": "org.lctx", "m:artifactId": "lctx",
        "m:version": sys.argv[2], "m:packaging": "jar"}
bad = {k: get(k) for k, v in want.items() if get(k) != v}
deps = [(get_d("m:groupId"), get_d("m:artifactId"), get_d("m:scope"))
        for d in root.findall("m:dependencies/m:dependency", ns)
        for get_d in [lambda p, d=d: (d.findtext(p, namespaces=ns) or "").strip()]]
if deps != [("org.junit.jupiter", "junit-jupiter", "test")]:
    bad["dependencies"] = deps
if bad:
    sys.exit(f"test_pom: unexpected values in pom.xml: {bad} (want {want})")
PY
if command -v mvn >/dev/null; then
    repo="$(mktemp -d)"
    trap 'rm -rf "$repo"' EXIT
    if ! out="$(mvn -o -q -B -Dmaven.repo.local="$repo" -f "$pom" validate 2>&1)"; then
        echo "$out" >&2
        echo "test_pom: mvn rejects pom.xml" >&2
        exit 1
    fi
    echo "test_pom: pom.xml ok (org.lctx:lctx:$version; mvn -o validate passed)"
else
    echo "test_pom: pom.xml ok (org.lctx:lctx:$version; mvn not installed, Maven validation skipped)"
fi
