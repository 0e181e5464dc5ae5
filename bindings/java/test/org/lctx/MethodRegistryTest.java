package org.lctx;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;
import java.util.TreeMap;
import org.junit.jupiter.api.Test;

/**
 * The binding's method list (the LCTX_METHOD_* constants of lctx_method)
 * against the library's registry read through the C API: same values, same
 * names. Fails when one has a method the other lacks.
 */
class MethodRegistryTest {
    static TreeMap<Integer, String> bindingMethods() throws IllegalAccessException {
        TreeMap<Integer, String> m = new TreeMap<>();
        for (Field f : lctx_method.class.getFields()) {
            if (!Modifier.isStatic(f.getModifiers()) || !f.getName().startsWith("LCTX_METHOD_")) continue;
            String prev = m.put(f.getInt(null), f.getName().substring("LCTX_METHOD_".length()));
            assertNull(prev, "two constants with the value of " + f.getName());
        }
        return m;
    }

    @Test
    void methodConstantsMatchTheRegistry() throws IllegalAccessException {
        TreeMap<Integer, String> binding = bindingMethods();
        int n = Lctx.methodCount();
        assertTrue(n >= 12);
        assertEquals(n, binding.size(), "binding " + binding.values() + " vs registry of " + n + " methods");
        for (int v = 0; v < n; v++) {
            String name = Lctx.methodName(v);
            assertNotNull(name, "registry has no name for " + v);
            assertEquals(name, binding.get(v).toLowerCase(Locale.ROOT), "method " + v);
            assertEquals(v, Lctx.methodFromName(name));
            assertEquals(v, Lctx.methodFromName(binding.get(v)));
            assertNotNull(Lctx.methodDescription(v));
        }
        assertNull(Lctx.methodName(n));
        assertFalse(Lctx.methodIsImplemented(n));
        assertTrue(Lctx.methodIsImplemented(lctx_method.LCTX_METHOD_REFORM));
        assertFalse(Lctx.methodIsImplemented(lctx_method.LCTX_METHOD_REATTENTION));
        LctxException e = assertThrows(LctxException.class, () -> Lctx.methodFromName("reformer"));
        assertTrue(e.getMessage().contains("reformer"), e.getMessage());
    }

    static Path tinyModel() {
        String p = System.getenv("LCTX_TINY_MODEL");
        if (p != null) return Path.of(p);
        Path root = Path.of(System.getenv().getOrDefault("LCTX_SOURCE_DIR", "."));
        Path inRepo = root.resolve("tests/data/stories260K.gguf");
        return Files.exists(inRepo) ? inRepo : root.resolve("../shared/models/stories260K.gguf");
    }

    @Test
    void methodStructsReachTheLibrary() {
        Path tiny = tinyModel();
        assertTrue(Files.isRegularFile(tiny), "test model missing: " + tiny);
        try (Model m = new Model(tiny.toString(), 1, true)) {
            // Out-of-range knobs are refused with their names: the structs are read.
            LctxException e = assertThrows(LctxException.class, () -> m.newSession(new Session.Params()
                    .method(lctx_method.LCTX_METHOD_INFLLM).infllm(i -> { i.setBlock(4); i.setRepr(5); })));
            assertTrue(e.getMessage().contains("infllm_repr"), e.getMessage());
            e = assertThrows(LctxException.class, () -> m.newSession(new Session.Params()
                    .method(lctx_method.LCTX_METHOD_INFINIPOT).kv(k -> k.setInfinipot_nuc_ratio(2.0f))));
            assertTrue(e.getMessage().contains("infinipot_nuc_ratio"), e.getMessage());
            e = assertThrows(LctxException.class, () -> m.newSession(new Session.Params()
                    .method(lctx_method.LCTX_METHOD_REFORM).reform(r -> r.setHeads_path("/nonexistent/heads.json"))));
            assertTrue(e.getMessage().contains("/nonexistent/heads.json"), e.getMessage());
            // Every implemented method creates a session; the others are unsupported.
            for (int v = 0; v < Lctx.methodCount(); v++) {
                final int method = v;
                Session.Params p = new Session.Params().method(method).nThreads(1)
                        .kv(k -> { k.setBudget(64); k.setChunk(32); k.setSink(4); k.setRecent(4); })
                        .infllm(i -> i.setBlock(16));
                if (Lctx.methodIsImplemented(method)) {
                    try (Session s = m.newSession(p)) {
                        s.feedText("Once upon a time there was a little girl.");
                        s.buildIndex();
                    }
                } else {
                    LctxException u = assertThrows(LctxException.class, () -> m.newSession(p));
                    assertTrue(u.getMessage().contains(Lctx.methodName(method)), u.getMessage());
                }
            }
        }
    }
}
