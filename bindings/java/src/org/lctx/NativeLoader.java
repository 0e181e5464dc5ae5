package org.lctx;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;

/**
 * Loads liblctx_jni (and liblctx): from the directory in the system property
 * {@code lctx.library.path}, else from the jar (native/linux-x86_64/, copied
 * to a temporary directory with the backend modules the jar carries), else
 * from java.library.path.
 */
final class NativeLoader {
    private static boolean loaded;

    private NativeLoader() {}

    static synchronized void load() {
        if (loaded) return;
        String dir = System.getProperty("lctx.library.path");
        if (dir != null) {
            System.load(Path.of(dir, "liblctx_jni.so").toAbsolutePath().toString());
        } else if (!loadFromJar()) {
            System.loadLibrary("lctx_jni");
        }
        loaded = true;
    }

    private static boolean loadFromJar() {
        String base = "/org/lctx/native/" + System.getProperty("os.name").toLowerCase().replace(' ', '_')
                + "-" + System.getProperty("os.arch") + "/";
        if (NativeLoader.class.getResource(base + "liblctx_jni.so") == null) return false;
        try {
            Path tmp = Files.createTempDirectory("lctx-native");
            tmp.toFile().deleteOnExit();
            // liblctx-cuda.so (present when the jar was built with it): beside
            // liblctx.so.0, where the backend registry finds its modules.
            for (String name : new String[] {"liblctx.so.0", "liblctx_jni.so", "liblctx-cuda.so"}) {
                try (InputStream in = NativeLoader.class.getResourceAsStream(base + name)) {
                    if (in == null) continue;
                    Path f = tmp.resolve(name);
                    Files.copy(in, f, StandardCopyOption.REPLACE_EXISTING);
                    f.toFile().deleteOnExit();
                }
            }
            // liblctx.so.0 first: liblctx_jni.so's run path may name a build tree that is
            // gone; with a library of that soname already loaded, the dynamic linker uses it.
            if (Files.exists(tmp.resolve("liblctx.so.0"))) System.load(tmp.resolve("liblctx.so.0").toString());
            System.load(tmp.resolve("liblctx_jni.so").toString());
            return true;
        } catch (IOException e) {
            throw new UnsatisfiedLinkError("cannot unpack the lctx native library: " + e);
        }
    }
}
