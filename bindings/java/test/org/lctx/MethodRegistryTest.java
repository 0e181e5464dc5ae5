package org.lctx;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
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
import java.util.Random;
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
        // Every method of the registry is implemented; a value outside the enum is not.
        for (int v = 0; v < n; v++) assertTrue(Lctx.methodIsImplemented(v), Lctx.methodName(v));
        assertFalse(Lctx.methodIsImplemented(-1));
        LctxException e = assertThrows(LctxException.class, () -> Lctx.methodFromName("reformer"));
        assertTrue(e.getMessage().contains("reformer"), e.getMessage());
    }

    static Path tinyModel() {
        String p = System.getenv("LCTX_TINY_MODEL");
        if (p != null) return Path.of(p);
        Path root = Path.of(System.getenv().getOrDefault("LCTX_SOURCE_DIR", "."));
        return root.resolve("tests/data/stories260K.gguf");   // committed with the tests
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
            // Every method creates a session; a value outside the enum is an invalid argument.
            for (int v = 0; v < Lctx.methodCount(); v++) {
                Session.Params p = new Session.Params().method(v).nThreads(1)
                        .kv(k -> { k.setBudget(64); k.setChunk(32); k.setSink(4); k.setRecent(4); })
                        .infllm(i -> i.setBlock(16));
                try (Session s = m.newSession(p)) {
                    s.feedText("Once upon a time there was a little girl.");
                    s.buildIndex();
                }
            }
            for (int bad : new int[] {Lctx.methodCount(), Lctx.methodCount() + 7, -1}) {
                LctxException u = assertThrows(LctxException.class,
                        () -> m.newSession(new Session.Params().method(bad).nThreads(1)));
                assertEquals(lctx_status.LCTX_ERR_INVALID_ARG, u.status(), u.getMessage());
                assertTrue(u.getMessage().contains("unknown method"), u.getMessage());
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
                                // The document repeats itself: the repeat filter is off so that ILRe
                                // ranks by its raw scores (the filter zeroes the later copies).
                                i.setRepeat_window(-1);
                                tweak.accept(i);
                            });
            try (Session s = m.newSession(params.apply(i -> {}))) {
                int n = s.feedText(doc);
                assertTrue(n > 4 + 40, "document of " + n + " tokens");
                s.buildIndex();
                LctxException before = assertThrows(LctxException.class, s::selectScores);
                assertEquals(lctx_status.LCTX_ERR_STATE, before.status(), before.getMessage());
                try (Selection sel = s.select(m.tokenize(" Lily saw a", false, true))) {
                    long[] pos = sel.positions();
                    // selectScores: one score per document token; ILRe ranks by its raw
                    // scores, the sinks are forced, and the selection's scores are
                    // those at its positions.
                    Session.SelectScores sc = s.selectScores();
                    assertEquals(n, sc.raw.length);
                    assertArrayEquals(sc.raw, sc.ranked);
                    assertEquals(4, sc.forcedFirst);
                    assertEquals(0, sc.forcedLast);
                    float[] selScores = sel.scores();
                    for (int k = 0; k < pos.length; k++) assertEquals(sc.raw[(int) pos[k]], selScores[k]);
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

    /** attended (lctx_session_attended): one share per stored token, in [0, 1]; the
     * global and local tokens were in every layer's window, the middle only where a
     * layer's spans fell (3 spans of 8: at most 24 of 264); refused for FULL, whose
     * decode attends to its whole cache. */
    @Test
    void attendedSharesOfReattention() {
        Path tiny = tinyModel();
        assertTrue(Files.isRegularFile(tiny), "test model missing: " + tiny);
        try (Model m = new Model(tiny.toString(), 1, true)) {
            Random rng = new Random(11);
            int[] doc = new int[300];
            for (int k = 0; k < doc.length; k++) doc[k] = 3 + rng.nextInt(m.nVocab() - 3);
            Session.Params params = new Session.Params().method(lctx_method.LCTX_METHOD_REATTENTION).nCtx(512)
                    .nThreads(1).reattention(r -> {
                        r.setN_global(4);
                        r.setN_local(32);
                        r.setSpan(8);
                        r.setN_spans(3);
                        r.setChunk(16);
                    });
            try (Session s = m.newSession(params)) {
                assertEquals(0, s.attended().length, "nothing stored yet");
                s.feed(doc);
                s.buildIndex();
                float[] share = s.attended();
                assertEquals(300, share.length);
                assertEquals(300, s.nFed());
                int unseen = 0;
                for (int t = 0; t < share.length; t++) {
                    assertTrue(share[t] >= 0.0f && share[t] <= 1.0f, "token " + t + ": " + share[t]);
                    if (t < 4 || t >= 300 - 32) assertEquals(1.0f, share[t], "token " + t);
                    else if (share[t] == 0.0f) unseen++;
                }
                assertTrue(unseen > 0, "every middle token was in some layer's window");
            }
            try (Session f = m.newSession(new Session.Params().method(lctx_method.LCTX_METHOD_FULL).nCtx(512).nThreads(1))) {
                f.feed(doc);
                f.buildIndex();
                LctxException e = assertThrows(LctxException.class, f::attended);
                assertEquals(lctx_status.LCTX_ERR_UNSUPPORTED, e.status(), e.getMessage());
                assertTrue(e.getMessage().contains("attends to its whole cache"), e.getMessage());
            }
        }
    }

    static final String DOC = "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
            + "park. ";

    /** ReAttention with small sizes: a document longer than n_global + n_local has a
     * middle that every layer scores, so the answer differs from FULL's; select returns
     * every document position; an odd span is refused as an invalid argument. */
    @Test
    void reattentionSessionWithExplicitParams() {
        Path tiny = tinyModel();
        assertTrue(Files.isRegularFile(tiny), "test model missing: " + tiny);
        lctx_reattention_params d = new lctx_reattention_params();
        LctxNative.lctx_reattention_default_params(d);
        assertEquals(-1, d.getN_global());
        assertEquals(-1, d.getN_local());
        assertEquals(-1, d.getSpan());
        assertEquals(-1, d.getTop_k());
        assertEquals(-1, d.getN_spans());
        assertEquals(-1, d.getChunk());
        assertEquals(1, d.getReuse_steps());
        assertFalse(d.getTile_max());
        assertEquals(0L, d.getStore_max_ram());
        assertNull(d.getStore_dir());
        d.delete();
        try (Model m = new Model(tiny.toString(), 1, true)) {
            Function<Consumer<lctx_reattention_params>, Session.Params> params =
                    tweak -> new Session.Params().method(lctx_method.LCTX_METHOD_REATTENTION).nCtx(512).nThreads(1)
                            .reattention(r -> {
                                r.setN_global(4);
                                r.setN_local(64);
                                r.setSpan(8);
                                r.setTop_k(2);
                                r.setN_spans(4);
                                r.setChunk(16);
                                r.setReuse_steps(1);
                                r.setTile_max(false);
                                r.setStore_max_ram(0);
                                tweak.accept(r);
                            });
            int[] question = m.tokenize(" Lily saw a", false, true);
            float[] logits;
            try (Session s = m.newSession(params.apply(r -> {}))) {
                int n = s.feedText(DOC.repeat(8));
                assertTrue(n > 4 + 64 + 4 * 8, "document of " + n + " tokens");
                s.buildIndex();
                try (Selection sel = s.select(question)) {
                    long[] pos = sel.positions();
                    assertEquals(n, pos.length);
                    for (int k = 0; k < n; k++) assertEquals(k, pos[k]);
                    s.recompute(sel);
                }
                logits = s.logits();
                for (int k = 0; k < 6; k++) {
                    int tok = s.decode(null);
                    assertTrue(tok >= 0 && tok < m.nVocab(), "token " + tok);
                }
                assertEquals(lctx_stage.LCTX_STAGE_DECODING, s.stage());
            }
            try (Session f = m.newSession(new Session.Params().method(lctx_method.LCTX_METHOD_FULL).nCtx(512).nThreads(1))) {
                f.feedText(DOC.repeat(8));
                f.buildIndex();
                try (Selection sel = f.select(question)) {
                    f.recompute(sel);
                }
                float[] full = f.logits();
                assertEquals(m.nVocab(), logits.length);
                assertEquals(full.length, logits.length);
                double diff = 0;
                for (int k = 0; k < full.length; k++) diff = Math.max(diff, Math.abs(full[k] - logits[k]));
                assertTrue(diff > 1e-4, "ReAttention read the whole document (max logit difference " + diff + ")");
            }
            LctxException e = assertThrows(LctxException.class, () -> m.newSession(params.apply(r -> r.setSpan(7))));
            assertEquals(lctx_status.LCTX_ERR_INVALID_ARG, e.status(), e.getMessage());
            assertTrue(e.getMessage().contains("span"), e.getMessage());
            e = assertThrows(LctxException.class, () -> m.newSession(params.apply(r -> r.setChunk(65))));
            assertEquals(lctx_status.LCTX_ERR_INVALID_ARG, e.status(), e.getMessage());
            assertTrue(e.getMessage().contains("chunk"), e.getMessage());
        }
    }

    /** RefreshKV with small K and stride: the statistics count every decoded token at
     * every layer (full + partial = steps), decodeToken teacher-forces, a bad pool
     * kernel is refused as an invalid argument. */
    @Test
    void refreshkvSessionWithExplicitParams() {
        Path tiny = tinyModel();
        assertTrue(Files.isRegularFile(tiny), "test model missing: " + tiny);
        lctx_refreshkv_params d = new lctx_refreshkv_params();
        LctxNative.lctx_refreshkv_default_params(d);
        assertEquals(0, d.getPartial());
        assertEquals(0, d.getStride());
        assertEquals(0.0f, d.getThreshold());
        assertEquals(lctx_refreshkv_schedule.LCTX_REFRESHKV_DYNAMIC, d.getSchedule());
        assertEquals(0, d.getPool_kernel());
        assertEquals(0, d.getMax_partial_run());
        assertFalse(d.getGathered());
        d.delete();
        try (Model m = new Model(tiny.toString(), 1, true)) {
            Function<Consumer<lctx_refreshkv_params>, Session.Params> params =
                    tweak -> new Session.Params().method(lctx_method.LCTX_METHOD_REFRESHKV).nCtx(512).nThreads(1)
                            .refreshkv(r -> {
                                r.setPartial(16);
                                r.setStride(2);
                                r.setThreshold(0.5f);
                                r.setSchedule(lctx_refreshkv_schedule.LCTX_REFRESHKV_DYNAMIC);
                                r.setPool_kernel(3);
                                r.setMax_partial_run(3);
                                r.setGathered(false);
                                tweak.accept(r);
                            });
            try (Session s = m.newSession(params.apply(r -> {}))) {
                int n = s.feedText(DOC.repeat(4));
                assertTrue(n > 16, "document of " + n + " tokens");
                s.buildIndex();
                try (Selection sel = s.select(m.tokenize(" Lily saw a", false, true))) {
                    s.recompute(sel);
                }
                int first = -1;
                for (int k = 0; k < 9; k++) {
                    int tok = s.decode(null);
                    assertTrue(tok >= 0 && tok < m.nVocab(), "token " + tok);
                    if (k == 0) first = tok;
                }
                float lp = s.decodeToken(first);
                assertTrue(lp <= 0.0f, "log-probability " + lp);
                Session.RefreshKvStats st = s.refreshkvStats();
                assertEquals(m.nLayer(), st.nLayer);
                assertEquals(16, st.partial);
                assertEquals(9, st.nSteps, "10 tokens decoded, the last one not yet appended");
                assertEquals(st.nSteps * st.nLayer, st.nFull + st.nPartial);
                assertEquals(st.nLayer, st.layerFull.length);
                assertEquals(st.nLayer, st.layerPartial.length);
                long sumFull = 0;
                for (int l = 0; l < st.nLayer; l++) {
                    assertEquals(st.nSteps, st.layerFull[l] + st.layerPartial[l], "layer " + l);
                    assertTrue(st.layerFull[l] >= 3, "max_partial_run 3: full steps at 3, 6, 9 at least");
                    sumFull += st.layerFull[l];
                }
                assertEquals(st.nFull, sumFull);
                assertTrue(st.effectiveStride >= 1.0);
                LctxException e = assertThrows(LctxException.class, () -> s.decodeToken(m.nVocab() + 5));
                assertEquals(lctx_status.LCTX_ERR_INVALID_ARG, e.status(), e.getMessage());
            }
            try (Session f = m.newSession(new Session.Params().method(lctx_method.LCTX_METHOD_FULL).nCtx(256).nThreads(1))) {
                LctxException e = assertThrows(LctxException.class, f::refreshkvStats);
                assertEquals(lctx_status.LCTX_ERR_UNSUPPORTED, e.status(), e.getMessage());
            }
            LctxException e = assertThrows(LctxException.class,
                    () -> m.newSession(params.apply(r -> r.setPool_kernel(4))));
            assertEquals(lctx_status.LCTX_ERR_INVALID_ARG, e.status(), e.getMessage());
            assertTrue(e.getMessage().contains("pool_kernel"), e.getMessage());
            e = assertThrows(LctxException.class, () -> m.newSession(params.apply(r -> r.setStride(-1))));
            assertEquals(lctx_status.LCTX_ERR_INVALID_ARG, e.status(), e.getMessage());
            assertTrue(e.getMessage().contains("stride"), e.getMessage());
        }
    }

    /** What one question's greedy answer gave: the tokens, then the logits after them. */
    static final class Answer {
        final int[] tokens = new int[16];
        float[] logits;

        Answer(Session s, int[] question) {
            try (Selection sel = s.select(question)) {
                s.recompute(sel);
            }
            for (int k = 0; k < tokens.length; k++) tokens[k] = s.decode(null);
            logits = s.logits();
        }

        void assertSame(Answer want, String what) {
            assertArrayEquals(want.tokens, tokens, what + ": tokens");
            assertArrayEquals(want.logits, logits, what + ": logits");
        }
    }

    /** One REFRESHKV session answers a question with RefreshKV, densely after
     * setRefreshkv(null), then with RefreshKV again; each answer equals the one of
     * a fresh session of that way (FULL for dense). K = 8 slots of a ~100-token
     * prompt: the two ways answer differently, so the comparisons mean something.
     * Bad knobs and a method that cannot switch are refused by status. */
    @Test
    void setRefreshkvSwitchesBetweenRefreshkvAndDense() {
        Path tiny = tinyModel();
        assertTrue(Files.isRegularFile(tiny), "test model missing: " + tiny);
        Consumer<lctx_refreshkv_params> knobs = r -> {
            r.setPartial(8);
            r.setStride(3);
        };
        Function<Integer, Session.Params> params = method -> new Session.Params().method(method).nCtx(512)
                .nThreads(1).refreshkv(knobs).kv(k -> k.setBudget(64));
        try (Model m = new Model(tiny.toString(), 1, true)) {
            int[] question = m.tokenize(" Lily saw a", false, true);
            Function<Integer, Session> opened = method -> {
                Session s = m.newSession(params.apply(method));
                s.feedText(DOC.repeat(4));
                s.buildIndex();
                return s;
            };
            Answer wantRkv, wantFull;
            try (Session f = opened.apply(lctx_method.LCTX_METHOD_REFRESHKV)) {
                wantRkv = new Answer(f, question);
            }
            try (Session f = opened.apply(lctx_method.LCTX_METHOD_FULL)) {
                wantFull = new Answer(f, question);
            }
            assertFalse(java.util.Arrays.equals(wantRkv.tokens, wantFull.tokens),
                    "K too large for RefreshKV to differ from dense");

            try (Session s = opened.apply(lctx_method.LCTX_METHOD_REFRESHKV)) {
                new Answer(s, question).assertSame(wantRkv, "RefreshKV first");
                s.setRefreshkv(null);
                new Answer(s, question).assertSame(wantFull, "dense after setRefreshkv(null)");
                LctxException e = assertThrows(LctxException.class, s::refreshkvStats);
                assertEquals(lctx_status.LCTX_ERR_UNSUPPORTED, e.status(), "dense: no RefreshKV statistics");
                s.setRefreshkv(knobs);
                new Answer(s, question).assertSame(wantRkv, "RefreshKV again");
                assertEquals(8, s.refreshkvStats().partial);

                e = assertThrows(LctxException.class, () -> s.setRefreshkv(r -> {
                    r.setPartial(8);
                    r.setStride(-3);
                }));
                assertEquals(lctx_status.LCTX_ERR_INVALID_ARG, e.status(), e.getMessage());
                assertTrue(e instanceof LctxException.InvalidArgException, e.getClass().getName());
                assertTrue(e.getMessage().contains("stride"), e.getMessage());
                new Answer(s, question).assertSame(wantRkv, "RefreshKV after the refused switch");
            }
            try (Session h = opened.apply(lctx_method.LCTX_METHOD_H2O)) {
                LctxException e = assertThrows(LctxException.class, () -> h.setRefreshkv(knobs));
                assertEquals(lctx_status.LCTX_ERR_UNSUPPORTED, e.status(), e.getMessage());
                assertTrue(e.getMessage().contains("h2o"), e.getMessage());
                e = assertThrows(LctxException.class, () -> h.setRefreshkv(null));
                assertEquals(lctx_status.LCTX_ERR_UNSUPPORTED, e.status(), e.getMessage());
            }
        }
    }
}
