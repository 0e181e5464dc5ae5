#!/usr/bin/env bash
# lctx.jar away from the build tree: the jar alone is copied to a temporary
# directory and a tiny program runs from there with LD_LIBRARY_PATH unset. It
# loads a model and tokenizes, and fails when liblctx.so.0 or liblctx_jni.so
# is mapped from anywhere but the jar's extraction directory (a jar without
# liblctx.so.0 would take the build tree's through liblctx_jni.so's run path,
# or fail with UnsatisfiedLinkError once the build tree is gone). When the jar
# carries liblctx-cuda.so, a session asked for "cuda" (LCTX_BACKEND) must find
# it beside the extracted liblctx.so.0: without a device the fallback line
# names that file.
# usage: test_jar_portable.sh LCTX.JAR BUILD_DIR MODEL.gguf [JAVA]
set -euo pipefail
jar_src="$1"
build="$(cd "$2" && pwd -P)"
model="$3"
java="${4:-java}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# 1. Both native libraries are in the jar.
names="$(unzip -Z1 "$jar_src" 2>/dev/null || "$(dirname "$(readlink -f "$(command -v "$java")")")/jar" tf "$jar_src")"
for lib in liblctx_jni.so liblctx.so.0; do
    grep -q "^org/lctx/native/linux-[^/]*/$lib\$" <<<"$names" ||
        { echo "FAIL: lctx.jar lacks $lib; its native files:"; grep native <<<"$names" || true; exit 1; }
done

# 2. The jar alone, in a clean directory, no library path.
mkdir -p "$tmp/app" "$tmp/java-tmp"
cp "$jar_src" "$tmp/app/lctx.jar"
cp "$model" "$tmp/app/model.gguf"
cat > "$tmp/app/Portable.java" <<'JAVA'
import java.nio.file.Files;
import java.nio.file.Path;
import org.lctx.Lctx;
import org.lctx.Model;

public class Portable {
    public static void main(String[] args) throws Exception {
        String build = args[0];
        Lctx.setLogHandler((level, message) -> System.out.println("log: " + message), Lctx.LOG_INFO);
        try (Model model = new Model("model.gguf")) {
            int[] ids = model.tokenize("Lily had a red ball.", true, false);
            if (ids.length == 0) throw new AssertionError("no tokens");
            System.out.println("tokens: " + ids.length);
            model.newSession().close();   // the backend registry runs
        }
        // Every lctx library mapped into this process, and where from.
        java.util.Set<String> seen = new java.util.TreeSet<>();
        for (String line : Files.readAllLines(Path.of("/proc/self/maps"))) {
            int at = line.indexOf('/');
            if (at < 0) continue;
            String file = line.substring(at);
            String name = Path.of(file).getFileName().toString();
            if (!name.startsWith("liblctx")) continue;
            String real = Path.of(file).toRealPath().toString();
            if (real.startsWith(build + "/")) throw new AssertionError(name + " was loaded from the build tree: " + real);
            seen.add(real);
        }
        for (String f : seen) System.out.println("mapped: " + f);
        if (seen.isEmpty()) throw new AssertionError("no liblctx library mapped");
    }
}
JAVA
cd "$tmp/app"
cuda=0
grep -q "^org/lctx/native/linux-[^/]*/liblctx-cuda.so\$" <<<"$names" && cuda=1
[[ -f "$build/liblctx-cuda.so" && $cuda == 0 ]] && { echo "FAIL: the CUDA module was built but is not in lctx.jar"; exit 1; }
out="$(env -u LD_LIBRARY_PATH -u CLASSPATH -u LCTX_BACKEND_PATH LCTX_BACKEND=cuda "$java" -Djava.io.tmpdir="$tmp/java-tmp" -cp lctx.jar Portable.java "$build" 2>&1)" ||
    { echo "FAIL: the jar does not run on its own:"; echo "$out"; exit 1; }
echo "$out"
grep -q 'mapped: .*/liblctx\.so\.0$' <<<"$out" || { echo "FAIL: liblctx.so.0 not loaded from the jar"; exit 1; }
grep -q 'mapped: .*/liblctx_jni\.so$' <<<"$out" || { echo "FAIL: liblctx_jni.so not loaded from the jar"; exit 1; }
if ((cuda)); then
    grep -q 'mapped: .*/liblctx-cuda\.so$' <<<"$out" || { echo "FAIL: liblctx-cuda.so not loaded from the jar"; exit 1; }
    if grep -q "backend 'cuda' is not available" <<<"$out"; then
        grep -Eq "^log: backend 'cuda' is not available on this machine \(module $tmp/java-tmp/lctx-native[^/]*/liblctx-cuda\.so: cannot run on this machine \(no device or driver\)\); using the CPU\$" <<<"$out" ||
            { echo "FAIL: the fallback line does not name the module extracted from the jar"; exit 1; }
        echo "java_jar_portable: liblctx-cuda.so from the jar found beside liblctx.so.0 (no device: CPU fallback logged)"
    else
        echo "java_jar_portable: liblctx-cuda.so from the jar found and running (a device is present)"
    fi
fi
echo "java_jar_portable: the jar runs alone (the native libraries from the jar)"
