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
import java.util.function.Consumer;
import java.util.function.Function;
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

    /** ILRe with explicit knobs: the five stages run, the selection is the sinks + the budget
     * (the document is longer), and a bad value of a knob is refused as an invalid argument. */
    @Test
    void ilreSessionWithExplicitParams() {
        Path tiny = tinyModel();
        assertTrue(Files.isRegularFile(tiny), "test model missing: " + tiny);
        String doc = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
                .repeat(4);
        try (Model m = new Model(tiny.toString(), 1, true)) {
            Function<Consumer<lctx_ilre_params>, Session.Params> params =
                    tweak -> new Session.Params().method(lctx_method.LCTX_METHOD_ILRE).nCtx(256).nThreads(1)
                            .ilre(i -> {
                                i.setRetrieval_layer(1);
                                i.setSink(4);
                                i.setWindow(32);
                                i.setChunk(64);
                                i.setBudget(40);
                                i.setQuery_tokens(0);
                                i.setDca(true);
                                i.setMax_kernels("2,4");
                                i.setAvg_kernels("1-8");
                                tweak.accept(i);
                            });
            try (Session s = m.newSession(params.apply(i -> {}))) {
                int n = s.feedText(doc);
                assertTrue(n > 4 + 40, "document of " + n + " tokens");
                s.buildIndex();
                try (Selection sel = s.select(m.tokenize(" Lily saw a", false, true))) {
                    long[] pos = sel.positions();
                    assertEquals(4 + 40, sel.size());
                    assertEquals(4 + 40, pos.length);
                    for (int k = 0; k < 4; k++) assertEquals(k, pos[k], "the sinks are always gathered");
                    for (int k = 1; k < pos.length; k++) assertTrue(pos[k - 1] < pos[k]);
                    assertTrue(pos[pos.length - 1] < n);
                    s.recompute(sel);
                }
                for (int k = 0; k < 4; k++) {
                    int tok = s.decode(null);
                    assertTrue(tok >= 0 && tok < m.nVocab(), "token " + tok);
                }
                assertEquals(lctx_stage.LCTX_STAGE_DECODING, s.stage());
            }
            LctxException e = assertThrows(LctxException.class,
                    () -> m.newSession(params.apply(i -> i.setMax_kernels("2,x"))));
            assertEquals(lctx_status.LCTX_ERR_INVALID_ARG, e.status(), e.getMessage());
            assertTrue(e.getMessage().contains("max_kernels"), e.getMessage());
            e = assertThrows(LctxException.class, () -> m.newSession(params.apply(i -> i.setChunk(-1))));
            assertEquals(lctx_status.LCTX_ERR_INVALID_ARG, e.status(), e.getMessage());
            assertTrue(e.getMessage().contains("chunk"), e.getMessage());
        }
    }
}
