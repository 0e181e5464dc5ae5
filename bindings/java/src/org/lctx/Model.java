package org.lctx;

import java.lang.ref.Cleaner;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import java.util.WeakHashMap;

/**
 * A GGUF model, immutable after load and shareable between threads. Close it
 * (try-with-resources); closing closes the sessions still open on it. A
 * Cleaner frees a forgotten model, but do not rely on it.
 */
public final class Model implements AutoCloseable {
    static final Cleaner CLEANER = Cleaner.create();

    /** One chat turn for {@link #chatApply}. */
    public record ChatMessage(String role, String content) {}

    private static final class Handle implements Runnable {
        volatile SWIGTYPE_p_lctx_model ptr;

        Handle(SWIGTYPE_p_lctx_model ptr) {
            this.ptr = ptr;
        }

        @Override
        public synchronized void run() {
            if (ptr != null) {
                LctxNative.lctx_model_free(ptr);
                ptr = null;
            }
        }
    }

    private final Handle handle;
    private final Cleaner.Cleanable cleanable;
    private final Set<Session> sessions = Collections.synchronizedSet(Collections.newSetFromMap(new WeakHashMap<>()));

    public Model(String path) {
        this(path, 0, true);
    }

    /** nThreads <= 0: all cores. */
    public Model(String path, int nThreads, boolean useMmap) {
        this(load(path, null, nThreads, useMmap));
    }

    public static Model fromBytes(byte[] data) {
        return new Model(load(null, data, 0, true));
    }

    private Model(SWIGTYPE_p_lctx_model ptr) {
        handle = new Handle(ptr);
        cleanable = CLEANER.register(this, handle);
    }

    private static SWIGTYPE_p_lctx_model load(String path, byte[] data, int nThreads, boolean useMmap) {
        lctx_model_params p = new lctx_model_params();
        LctxNative.lctx_model_default_params(p);
        p.setN_threads(nThreads);
        p.setUse_mmap(useMmap);
        long[] out = new long[1];
        if (path != null) LctxNative.lctx_model_load(path, p, out);
        else LctxNative.lctx_model_load_from_memory(data, p, out);
        p.delete();
        return new SWIGTYPE_p_lctx_model(out[0], false);
    }

    SWIGTYPE_p_lctx_model ptr() {
        SWIGTYPE_p_lctx_model p = handle.ptr;
        if (p == null) throw new IllegalStateException("the model is closed");
        return p;
    }

    void register(Session s) {
        sessions.add(s);
    }

    @Override
    public void close() {
        List<Session> open;
        synchronized (sessions) {
            open = new ArrayList<>(sessions);
        }
        for (Session s : open) s.close();
        cleanable.clean();
    }

    public Session newSession() {
        return new Session(this, new Session.Params());
    }

    public Session newSession(Session.Params params) {
        return new Session(this, params);
    }

    public String architecture() { return LctxNative.lctx_model_architecture(ptr()); }
    public String name() { return LctxNative.lctx_model_name(ptr()); }
    public int nLayer() { return LctxNative.lctx_model_n_layer(ptr()); }
    public int nHead() { return LctxNative.lctx_model_n_head(ptr()); }
    public int nHeadKv() { return LctxNative.lctx_model_n_head_kv(ptr()); }
    public int headDim() { return LctxNative.lctx_model_head_dim(ptr()); }
    public int nEmbd() { return LctxNative.lctx_model_n_embd(ptr()); }
    public int nVocab() { return LctxNative.lctx_model_n_vocab(ptr()); }
    public int nCtxTrain() { return LctxNative.lctx_model_n_ctx_train(ptr()); }
    public long nParams() { return LctxNative.lctx_model_n_params(ptr()); }
    public long sizeBytes() { return LctxNative.lctx_model_size_bytes(ptr()); }
    public int tokenBos() { return LctxNative.lctx_model_token_bos(ptr()); }
    public int tokenEos() { return LctxNative.lctx_model_token_eos(ptr()); }
    public int tokenEot() { return LctxNative.lctx_model_token_eot(ptr()); }
    public int tokenPad() { return LctxNative.lctx_model_token_pad(ptr()); }
    public String chatTemplate() { return LctxNative.lctx_model_chat_template(ptr()); }
    public boolean isEog(int token) { return LctxNative.lctx_token_is_eog(ptr(), token); }

    public Optional<String> meta(String key) {
        byte[] v = LctxNative.lctx_model_meta_string(ptr(), key);
        return v == null ? Optional.empty() : Optional.of(new String(v, StandardCharsets.UTF_8));
    }

    public int[] tokenize(String text, boolean addSpecial, boolean parseSpecial) {
        return LctxNative.lctx_tokenize(ptr(), text.getBytes(StandardCharsets.UTF_8), addSpecial, parseSpecial);
    }

    public String detokenize(int[] tokens, boolean special) {
        return new String(LctxNative.lctx_detokenize(ptr(), tokens, special), StandardCharsets.UTF_8);
    }

    /** The bytes of one token (maybe part of a UTF-8 character). */
    public byte[] tokenToPiece(int token, boolean special) {
        return LctxNative.lctx_token_to_piece(ptr(), token, special);
    }

    /** Formats messages with the model's chat template; status UNSUPPORTED without one. */
    public String chatApply(List<ChatMessage> messages, boolean addAssistant) {
        String[] flat = new String[messages.size() * 2];
        for (int i = 0; i < messages.size(); i++) {
            flat[2 * i] = messages.get(i).role();
            flat[2 * i + 1] = messages.get(i).content();
        }
        return new String(LctxNative.lctx_chat_apply(ptr(), flat, addAssistant), StandardCharsets.UTF_8);
    }

    /** {prefix, suffix} around one user turn (ending with the assistant prefix); {"", "\n"} without a template. */
    public String[] promptParts() {
        String marker = "\u0001lctx-user-turn\u0001";
        try {
            String text = chatApply(List.of(new ChatMessage("user", marker)), true);
            int at = text.indexOf(marker);
            if (at >= 0) return new String[] {text.substring(0, at), text.substring(at + marker.length())};
        } catch (LctxException e) {
            if (e.status() != lctx_status.LCTX_ERR_UNSUPPORTED) throw e;
        }
        return new String[] {"", "\n"};
    }
}
