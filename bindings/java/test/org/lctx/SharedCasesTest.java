package org.lctx;

import static org.junit.jupiter.api.Assertions.*;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The cases of bindings/tests/shared_cases.json, which the Python, Go and
 * Rust tests run too; the expected answers come from `lctx run`
 * (bindings/tests/make_shared_cases.py). The JDK has no JSON reader: a small
 * one is below. */
class SharedCasesTest {
    static Path root = Path.of(System.getenv().getOrDefault("LCTX_SOURCE_DIR", "."));
    static Map<String, Object> cases;
    static Model model;
    static int threads;

    @BeforeAll
    @SuppressWarnings("unchecked")
    static void load() throws Exception {
        String text = Files.readString(root.resolve("bindings/tests/shared_cases.json"));
        cases = (Map<String, Object>) new Json(text).value();
        threads = ((Number) cases.get("n_threads")).intValue();
        model = new Model(root.resolve((String) cases.get("model")).toString(), threads, true);
    }

    @AfterAll
    static void free() {
        model.close();
    }

    /** Params with the method of a registry name (null: the library default). */
    static Session.Params params(Object method) {
        Session.Params p = new Session.Params().nThreads(threads);
        if (method != null) p.method(Lctx.methodFromName((String) method));
        return p;
    }

    @SuppressWarnings("unchecked")
    static List<Map<String, Object>> list(Object o) {
        return (List<Map<String, Object>>) o;
    }

    @SuppressWarnings("unchecked")
    static List<String> strings(Object o) {
        return (List<String>) o;
    }

    @Test
    @SuppressWarnings("unchecked")
    void answerCases() {
        for (Map<String, Object> c : list(cases.get("answer_cases"))) {
            String name = (String) c.get("name");
            try (Session s = model.newSession(params(c.get("method")))) {
                Conversation chat = new Conversation(s, false);
                chat.feedText((String) c.get("document"));
                List<Map<String, Object>> turns = list(c.get("turns"));
                for (Map<String, Object> turn : turns) {
                    Map<String, Object> sp = (Map<String, Object>) turn.get("sampling");
                    Sampling sampling = new Sampling();
                    sampling.temperature = ((Number) sp.get("temperature")).floatValue();
                    sampling.topK = ((Number) sp.get("top_k")).intValue();
                    sampling.topP = ((Number) sp.get("top_p")).floatValue();
                    sampling.seed = ((Number) sp.get("seed")).longValue();
                    sampling.stop = strings(turn.get("stop"));
                    StringBuilder streamed = new StringBuilder();
                    String got = chat.ask((String) turn.get("question"), ((Number) turn.get("n_predict")).intValue(),
                            sampling, streamed::append);
                    assertEquals(turn.get("answer"), got, name);
                    assertEquals(got, streamed.toString(), name);
                }
                assertEquals(turns.size(), chat.history().size(), name);
            }
        }
    }

    @Test
    void errorCases() {
        for (Map<String, Object> c : list(cases.get("error_cases"))) {
            String name = (String) c.get("name");
            List<String> seen = new ArrayList<>();
            LctxException e = assertThrows(LctxException.class, () -> {
                switch ((String) c.get("op")) {
                    case "load_model":
                        new Model(root.resolve((String) c.get("path")).toString()).close();
                        break;
                    case "method_from_name":
                        Lctx.methodFromName((String) c.get("text"));
                        break;
                    case "feed_tokens": {
                        List<?> t = (List<?>) c.get("tokens");
                        int[] toks = t.stream().mapToInt(x -> ((Number) x).intValue()).toArray();
                        try (Session s = model.newSession(params(null))) {
                            s.feed(toks);
                        }
                        break;
                    }
                    case "decode_after_feed":
                        try (Session s = model.newSession(params(null))) {
                            s.feedText((String) c.get("document"));
                            s.decode(null);
                        }
                        break;
                    case "cancel_in_progress":
                        try (Session s = model.newSession(params(null).onProgress((stage, done) -> {
                            if (!seen.contains(stage)) seen.add(stage);
                            return true;
                        }))) {
                            s.feedText((String) c.get("document"));
                        }
                        break;
                    default:
                        fail("unknown op " + c.get("op"));
                }
            }, name);
            assertEquals(c.get("error"), e.kind().kind(), name + ": " + e.getMessage());
            if (c.containsKey("labels")) assertEquals(c.get("labels"), seen, name);
        }
    }

    @Test
    @SuppressWarnings("unchecked")
    void progressLabels() {
        Map<String, Object> pc = (Map<String, Object>) cases.get("progress_case");
        List<String> seen = new ArrayList<>();
        try (Session s = model.newSession(params(pc.get("method")).onProgress((stage, done) -> {
            if (seen.isEmpty() || !seen.get(seen.size() - 1).equals(stage)) seen.add(stage);
            return false;
        }))) {
            s.feedText((String) pc.get("document"));
            s.ask((String) pc.get("question"), ((Number) pc.get("n_predict")).intValue());
        }
        assertEquals(pc.get("labels"), seen);
    }

    @Test
    void typedExceptions() {
        assertThrows(LctxException.IoException.class, () -> new Model(root.resolve("no/such.gguf").toString()));
        assertThrows(LctxException.InvalidArgException.class, () -> Lctx.methodFromName("no-such-method"));
    }

    /** Just enough JSON for shared_cases.json. */
    static final class Json {
        private final String s;
        private int i = 0;

        Json(String s) {
            this.s = s;
        }

        private void ws() {
            while (i < s.length() && Character.isWhitespace(s.charAt(i))) i++;
        }

        Object value() {
            ws();
            char c = s.charAt(i);
            if (c == '{') {
                i++;
                Map<String, Object> m = new LinkedHashMap<>();
                ws();
                if (s.charAt(i) == '}') { i++; return m; }
                while (true) {
                    ws();
                    String k = string();
                    ws();
                    i++; // ':'
                    m.put(k, value());
                    ws();
                    if (s.charAt(i++) == '}') return m;
                }
            }
            if (c == '[') {
                i++;
                List<Object> a = new ArrayList<>();
                ws();
                if (s.charAt(i) == ']') { i++; return a; }
                while (true) {
                    a.add(value());
                    ws();
                    if (s.charAt(i++) == ']') return a;
                }
            }
            if (c == '"') return string();
            if (s.startsWith("true", i)) { i += 4; return Boolean.TRUE; }
            if (s.startsWith("false", i)) { i += 5; return Boolean.FALSE; }
            if (s.startsWith("null", i)) { i += 4; return null; }
            int start = i;
            while (i < s.length() && "+-0123456789.eE".indexOf(s.charAt(i)) >= 0) i++;
            return Double.parseDouble(s.substring(start, i));
        }

        private String string() {
            i++; // '"'
            StringBuilder b = new StringBuilder();
            while (true) {
                char c = s.charAt(i++);
                if (c == '"') return b.toString();
                if (c != '\\') { b.append(c); continue; }
                char e = s.charAt(i++);
                switch (e) {
                    case 'n': b.append('\n'); break;
                    case 't': b.append('\t'); break;
                    case 'r': b.append('\r'); break;
                    case 'b': b.append('\b'); break;
                    case 'f': b.append('\f'); break;
                    case 'u': b.append((char) Integer.parseInt(s.substring(i, i + 4), 16)); i += 4; break;
                    default: b.append(e);
                }
            }
        }
    }
}
