package org.lctx;

import static org.junit.jupiter.api.Assertions.*;

import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

class BindingTest {
    static final String DOC = "Once upon a time, there was a little girl named Lily. She loved to play outside "
            + "in the park. One day, she saw a big red ball under a tree. ";
    static Path root = Path.of(System.getenv().getOrDefault("LCTX_SOURCE_DIR", "."));
    static Model model;

    /** stories260K: $LCTX_TINY_MODEL, or the copy committed under tests/data/. */
    static Path tinyPath() {
        String p = System.getenv("LCTX_TINY_MODEL");
        return p != null ? Path.of(p) : root.resolve("tests/data/stories260K.gguf");
    }

    @BeforeAll
    static void load() {
        Path tiny = tinyPath();
        // A missing model fails every test, never skips them.
        assertTrue(Files.isRegularFile(tiny),
                "test model missing: " + tiny + " (stories260K.gguf is committed under tests/data/)");
        model = new Model(tiny.toString(), 1, true);
    }

    @AfterAll
    static void free() {
        if (model != null) model.close();
    }

    @Test
    void everyHeaderFunctionIsWrapped() throws Exception {
        String h = Files.readString(root.resolve("include/lctx.h"));
        Matcher m = Pattern.compile("LCTX_API\\s+(?:LCTX_NODISCARD\\s+)?[\\w\\s*]+?\\b(lctx_\\w+)\\s*\\(").matcher(h);
        List<String> missing = new ArrayList<>();
        int n = 0;
        while (m.find()) {
            n++;
            boolean found = false;
            for (Method meth : LctxNative.class.getMethods()) found |= meth.getName().equals(m.group(1));
            if (!found) missing.add(m.group(1));
        }
        assertTrue(n > 40);
        assertEquals(List.of(), missing);
    }

    @Test
    void versionAndStatus() {
        assertFalse(Lctx.version().isEmpty());
        assertTrue(Lctx.versionNumber() > 0 || Lctx.version().startsWith("0.0"));
        assertFalse(Lctx.statusString(lctx_status.LCTX_ERR_STATE).isEmpty());
    }

    @Test
    void loadErrorsCarryTheMessage() {
        LctxException e = assertThrows(LctxException.class, () -> new Model("/nonexistent/m.gguf"));
        assertEquals(lctx_status.LCTX_ERR_IO, e.status());
        assertTrue(e.getMessage().contains("/nonexistent/m.gguf"), e.getMessage());
        e = assertThrows(LctxException.class, () -> Model.fromBytes("not a gguf".getBytes(StandardCharsets.UTF_8)));
        assertEquals(lctx_status.LCTX_ERR_FORMAT, e.status());
    }

    @Test
    void tokenizer() {
        assertEquals("llama", model.architecture());
        assertEquals(512, model.nVocab());
        int[] t = model.tokenize(DOC, true, false);
        assertEquals(model.tokenBos(), t[0]);
        assertEquals(DOC.strip(), model.detokenize(t, false).strip());
        StringBuilder sb = new StringBuilder();
        for (int i = 1; i < t.length; i++) sb.append(new String(model.tokenToPiece(t[i], false), StandardCharsets.UTF_8));
        assertEquals(DOC.strip(), sb.toString().strip());
        assertEquals(Optional.of("llama"), model.meta("general.architecture"));
        assertEquals(Optional.empty(), model.meta("no.such.key"));
        LctxException e = assertThrows(LctxException.class, () -> model.tokenToPiece(model.nVocab() + 3, false));
        assertEquals(lctx_status.LCTX_ERR_INVALID_ARG, e.status());
        e = assertThrows(LctxException.class,
                () -> model.chatApply(List.of(new Model.ChatMessage("user", "hi")), true));
        assertEquals(lctx_status.LCTX_ERR_UNSUPPORTED, e.status());
        assertArrayEquals(new String[] {"", "\n"}, model.promptParts());
    }

    // lctx_session_params.kv_type = LCTX_KV_Q8 through Params.configure: int8
    // KV rows (docs/kv-storage.md) run a session to a token.
    @Test
    void kvQ8ThroughConfigure() {
        try (Session s = model.newSession(new Session.Params().method(lctx_method.LCTX_METHOD_FULL).nCtx(512).nThreads(1)
                .configure(p -> p.setKv_type(lctx_kv_type.LCTX_KV_Q8)))) {
            s.feedText(DOC);
            s.buildIndex();
            try (Selection sel = s.select(model.tokenize(" She", false, false))) {
                s.recompute(sel);
            }
            assertTrue(s.decode(null) >= 0);
        }
    }

    // Per-op times (lctx_session_op_times): the JVM cannot set its own
    // environment, so a session is profiled only when the test runs with
    // LCTX_PROFILE_OPS set; otherwise the call answers LCTX_ERR_UNSUPPORTED.
    // run_tests.cmake runs it both ways.
    @Test
    void opTimes() {
        try (Session s = model.newSession(new Session.Params().method(lctx_method.LCTX_METHOD_FULL).nCtx(512).nThreads(1)
                .nBatch(64))) {
            int[] toks = new int[200];
            for (int i = 0; i < toks.length; ++i) toks[i] = 3 + i;
            s.feed(toks);
            String env = System.getenv("LCTX_PROFILE_OPS");
            if (env == null || env.isEmpty() || env.equals("0")) {
                LctxException e = assertThrows(LctxException.class, () -> s.opTimes(null));
                assertEquals(lctx_status.LCTX_ERR_UNSUPPORTED, e.status());
                assertTrue(e.getMessage().contains("LCTX_PROFILE_OPS"), e.getMessage());
                return;
            }
            double[] life = new double[1];
            List<Session.OpTime> ops = s.opTimes(life);
            double sum = 0;
            long attention = 0;
            for (Session.OpTime o : ops) {
                assertTrue(o.calls > 0 && o.seconds >= 0, o.op);
                sum += o.seconds;
                if (o.op.equals("attention")) attention = o.calls;
            }
            // 200 tokens in passes of 64; a fed chunk reads no logits, so the last layer computes no row.
            assertEquals(4L * (model.nLayer() - 1), attention);
            assertTrue(sum <= life[0]);
        }
    }

    @Test
    void stagesAndGreedyIsArgmax() {
        try (Session s = model.newSession(new Session.Params().method(lctx_method.LCTX_METHOD_FULL).nCtx(512).nThreads(1))) {
            LctxException e = assertThrows(LctxException.class, () -> s.decode(null));
            assertEquals(lctx_status.LCTX_ERR_STATE, e.status());
            assertEquals(e.getMessage(), s.lastError());
            int n = s.feedText(DOC);
            assertEquals(n, s.nFed());
            s.buildIndex();
            assertEquals(lctx_stage.LCTX_STAGE_INDEXED, s.stage());
            try (Selection sel = s.select(model.tokenize(" She", false, false))) {
                long[] pos = sel.positions();
                assertEquals(sel.size(), pos.length);
                assertEquals(pos.length, sel.scores().length);
                for (int i = 1; i < pos.length; i++) assertTrue(pos[i] > pos[i - 1] && pos[i] < n);
                s.recompute(sel);
            }
            float[] logits = s.logits();
            assertEquals(model.nVocab(), logits.length);
            int best = 0;
            for (int i = 1; i < logits.length; i++) if (logits[i] > logits[best]) best = i;
            assertEquals(best, s.decode(null));
        }
    }

    @Test
    void askManyIsDeterministic() {
        String[] a = new String[2];
        for (int r = 0; r < 2; r++) {
            try (Session s = model.newSession(new Session.Params().method(lctx_method.LCTX_METHOD_FULL).nCtx(512).nThreads(1))) {
                s.feedText(DOC + DOC);
                a[r] = s.ask(" Lily saw a", 16) + "|" + s.ask(" The ball was", 16);
            }
        }
        assertEquals(a[0], a[1]);
        assertTrue(a[0].length() > 2);
    }

    @Test
    void progressCancelAndExceptionPropagation() {
        AtomicInteger calls = new AtomicInteger();
        try (Session s = model.newSession(new Session.Params().method(lctx_method.LCTX_METHOD_FULL).nCtx(512).nThreads(1).nBatch(8)
                .progress(d -> calls.incrementAndGet() > 1))) {
            LctxException e = assertThrows(LctxException.class, () -> s.feedText(DOC));
            assertTrue(e.isCancelled());
            assertTrue(calls.get() >= 2);
            assertEquals(lctx_stage.LCTX_STAGE_FEEDING, s.stage());
        }
        try (Session s = model.newSession(new Session.Params().method(lctx_method.LCTX_METHOD_FULL).nCtx(512).nThreads(1).nBatch(8)
                .progress(d -> { throw new IllegalStateException("from the callback"); }))) {
            IllegalStateException e = assertThrows(IllegalStateException.class, () -> s.feedText(DOC));
            assertEquals("from the callback", e.getMessage());
        }
    }

    @Test
    void closeIsIdempotentAndModelClosesSessions() {
        Model m = new Model(tinyPath().toString());
        Session s = m.newSession(new Session.Params().method(lctx_method.LCTX_METHOD_FULL).nCtx(64));
        m.close();
        m.close();
        assertThrows(IllegalStateException.class, s::nFed);
        assertThrows(IllegalStateException.class, m::nVocab);
    }

    @Test
    void logHandlerAndUnknownMethod() {
        List<String> got = new ArrayList<>();
        Lctx.setLogHandler((level, msg) -> got.add(msg), Lctx.LOG_DEBUG);
        try (Session s = model.newSession(new Session.Params().method(lctx_method.LCTX_METHOD_FULL).nCtx(64).nThreads(1))) {
            s.feedText("Hello");
        } finally {
            Lctx.setLogHandler(null, Lctx.LOG_ERROR);
        }
        // Every registry method is implemented: a value outside the enum is refused.
        LctxException e = assertThrows(LctxException.class,
                () -> model.newSession(new Session.Params().method(Lctx.methodCount())));
        assertEquals(lctx_status.LCTX_ERR_INVALID_ARG, e.status());
        assertTrue(e.getMessage().contains("unknown method"), e.getMessage());
    }

    static double rssMib() throws Exception {
        for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
            if (line.startsWith("VmRSS:")) return Long.parseLong(line.replaceAll("[^0-9]", "")) / 1024.0;
        }
        throw new IllegalStateException("no VmRSS");
    }

    static void sessionLoop(int n) {
        for (int i = 0; i < n; i++) {
            try (Session s = model.newSession(new Session.Params().method(lctx_method.LCTX_METHOD_FULL).nCtx(4096).nThreads(1))) {
                s.feedText(DOC + DOC);
                s.ask(" Lily saw a", 4);
            }
        }
    }

    /* Each session holds a 4096-token KV cache (about 5 MiB on stories260K):
     * leaking sessions over 60 iterations would grow memory by about 300 MiB. */
    @Test
    void createFeedAskFreeDoesNotGrow() throws Exception {
        sessionLoop(15);
        System.gc();
        double before = rssMib();
        sessionLoop(60);
        System.gc();
        double grown = rssMib() - before;
        assertTrue(grown < 48, "resident memory grew by " + grown + " MiB over 60 sessions");
    }
}
