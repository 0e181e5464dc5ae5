package org.lctx;

import java.lang.ref.Cleaner;
import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharsetDecoder;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.function.Consumer;

/**
 * One document read with one method, then questions about it. Use a session
 * from one thread at a time; {@link #cancel()} may be called from any thread.
 */
public final class Session implements AutoCloseable {
    /** Called during long calls with done in [0,1]; return true to cancel. */
    @FunctionalInterface
    public interface Progress {
        boolean onProgress(float done);
    }

    /** {@link Progress} with the running call's label, one of {@link #STAGE_LABELS}. */
    @FunctionalInterface
    public interface StageProgress {
        boolean onProgress(String stage, float done);
    }

    /** The labels a {@link StageProgress} receives, one per long call. */
    public static final java.util.List<String> STAGE_LABELS =
            java.util.List.of("feed", "build_index", "select", "recompute");

    /** The library's default method (lctx_session_default_params): LCTX_METHOD_REFORM. */
    public static int defaultMethod() {
        lctx_session_params p = new lctx_session_params();
        try {
            LctxNative.lctx_session_default_params(p);
            return p.getMethod();
        } finally {
            p.delete();
        }
    }

    /**
     * Session parameters; {@link #configure} reaches every lctx_session_params
     * field, and {@link #reform}, {@link #kv}, {@link #infllm}, {@link #ilre},
     * {@link #reattention}, {@link #refreshkv} the method structs (each starts
     * from its lctx_*_default_params; unset: defaults).
     */
    public static final class Params {
        /** The library's default unless set: LCTX_METHOD_REFORM. */
        public int method = defaultMethod();
        public int nCtx = 0;
        public int nThreads = 0;
        public int nBatch = 0;
        public Progress progress;
        public StageProgress onProgress;
        public Consumer<lctx_session_params> configure;
        public Consumer<lctx_reform_params> reform;
        public Consumer<lctx_kv_params> kv;
        public Consumer<lctx_infllm_params> infllm;
        public Consumer<lctx_ilre_params> ilre;
        public Consumer<lctx_reattention_params> reattention;
        public Consumer<lctx_refreshkv_params> refreshkv;

        public Params method(int m) { method = m; return this; }
        public Params nCtx(int n) { nCtx = n; return this; }
        public Params nThreads(int n) { nThreads = n; return this; }
        public Params nBatch(int n) { nBatch = n; return this; }
        public Params progress(Progress p) { progress = p; return this; }
        /** Progress with the running call's label ("feed", "build_index", "select", "recompute"). */
        public Params onProgress(StageProgress p) { onProgress = p; return this; }
        public Params configure(Consumer<lctx_session_params> c) { configure = c; return this; }
        /** REFORM's knobs, e.g. {@code r -> r.setChunk(1024)}. */
        public Params reform(Consumer<lctx_reform_params> c) { reform = c; return this; }
        /** The KV baselines' knobs (truncate ... infinipot, infllm), e.g. {@code k -> k.setBudget(512)}. */
        public Params kv(Consumer<lctx_kv_params> c) { kv = c; return this; }
        /** InfLLM's own knobs, e.g. {@code i -> i.setBlock(64)}. */
        public Params infllm(Consumer<lctx_infllm_params> c) { infllm = c; return this; }
        /** ILRe's knobs, e.g. {@code i -> { i.setBudget(512); i.setMax_kernels("2,4"); }}. */
        public Params ilre(Consumer<lctx_ilre_params> c) { ilre = c; return this; }
        /** ReAttention's knobs (-1: derived from the model), e.g.
         * {@code r -> { r.setN_local(1024); r.setSpan(16); }}. */
        public Params reattention(Consumer<lctx_reattention_params> c) { reattention = c; return this; }
        /** RefreshKV's knobs (0: default), e.g. {@code r -> { r.setPartial(256); r.setStride(10); }};
         * {@code r.setGathered(true)} makes REFORM and ILRe decode with it. */
        public Params refreshkv(Consumer<lctx_refreshkv_params> c) { refreshkv = c; return this; }
    }

    /** Native state freed by close() or, as a safety net, by the Cleaner. It
     * holds the Model so that a model is never freed before its sessions. */
    private static final class Handle implements Runnable {
        volatile SWIGTYPE_p_lctx_session ptr;
        final long progressRef;
        final Model model;

        Handle(SWIGTYPE_p_lctx_session ptr, long progressRef, Model model) {
            this.ptr = ptr;
            this.progressRef = progressRef;
            this.model = model;
        }

        @Override
        public synchronized void run() {
            if (ptr != null) {
                LctxNative.lctx_session_free(ptr);
                ptr = null;
                LctxNative.lctxsw_global_ref_free(progressRef);
            }
        }
    }

    private final Model model;
    private final String[] label = {"feed"};   // the running call's label, read by onProgress
    private final Handle handle;
    private final Cleaner.Cleanable cleanable;

    Session(Model model, Params params) {
        this(model, params, null);
    }

    private Session(Model model, Params params, String indexPath) {
        this.model = model;
        if (params.progress != null && params.onProgress != null)
            throw new IllegalArgumentException("set progress or onProgress, not both");
        lctx_session_params p = new lctx_session_params();
        LctxNative.lctx_session_default_params(p);
        p.setMethod(params.method);
        if (params.nCtx != 0) p.setN_ctx(params.nCtx);
        if (params.nThreads != 0) p.setN_threads(params.nThreads);
        if (params.nBatch != 0) p.setN_batch(params.nBatch);
        // The method structs live until the call returns (the library copies them).
        lctx_reform_params rp = null;
        lctx_kv_params kp = null;
        lctx_infllm_params ip = null;
        lctx_ilre_params lp = null;
        lctx_reattention_params ap = null;
        lctx_refreshkv_params fp = null;
        if (params.reform != null) {
            rp = new lctx_reform_params();
            LctxNative.lctx_reform_default_params(rp);
            params.reform.accept(rp);
            p.setReform(rp);
        }
        if (params.kv != null) {
            kp = new lctx_kv_params();
            LctxNative.lctx_kv_default_params(kp);
            params.kv.accept(kp);
            p.setKv(kp);
        }
        if (params.infllm != null) {
            ip = new lctx_infllm_params();
            LctxNative.lctx_infllm_default_params(ip);
            params.infllm.accept(ip);
            p.setInfllm(ip);
        }
        if (params.ilre != null) {
            lp = new lctx_ilre_params();
            LctxNative.lctx_ilre_default_params(lp);
            params.ilre.accept(lp);
            p.setIlre(lp);
        }
        if (params.reattention != null) {
            ap = new lctx_reattention_params();
            LctxNative.lctx_reattention_default_params(ap);
            params.reattention.accept(ap);
            p.setReattention(ap);
        }
        if (params.refreshkv != null) {
            fp = new lctx_refreshkv_params();
            LctxNative.lctx_refreshkv_default_params(fp);
            params.refreshkv.accept(fp);
            p.setRefreshkv(fp);
        }
        if (params.configure != null) params.configure.accept(p);
        Progress prog = params.progress;
        if (prog == null && params.onProgress != null) {
            StageProgress on = params.onProgress;
            String[] cell = label;
            prog = done -> on.onProgress(cell[0], done);
        }
        long ref = LctxNative.lctxsw_session_params_set_progress(p,
                prog == null ? null : new ProgressAdapter(prog));
        long[] out = new long[1];
        try {
            if (indexPath == null) LctxNative.lctx_session_create(model.ptr(), p, out);
            else LctxNative.lctx_session_load_index(model.ptr(), indexPath, p, out);
        } catch (RuntimeException e) {
            LctxNative.lctxsw_global_ref_free(ref);
            throw e;
        } finally {
            p.delete();
            if (rp != null) rp.delete();
            if (kp != null) kp.delete();
            if (ip != null) ip.delete();
            if (lp != null) lp.delete();
            if (ap != null) ap.delete();
            if (fp != null) fp.delete();
        }
        handle = new Handle(new SWIGTYPE_p_lctx_session(out[0], false), ref, model);
        cleanable = Model.CLEANER.register(this, handle);
        model.register(this);
    }

    /** A REFORM session in stage INDEXED from a file written by {@link #saveIndex}. */
    public static Session loadIndex(Model model, String path, Params params) {
        return new Session(model, params, path);
    }

    /** The native trampoline calls onProgress(float) by name. */
    static final class ProgressAdapter {
        private final Progress p;

        ProgressAdapter(Progress p) {
            this.p = p;
        }

        boolean onProgress(float done) {
            return p.onProgress(done);
        }
    }

    SWIGTYPE_p_lctx_session ptr() {
        SWIGTYPE_p_lctx_session p = handle.ptr;
        if (p == null) throw new IllegalStateException("the session is closed");
        return p;
    }

    @Override
    public void close() {
        cleanable.clean();
    }

    public Model model() { return model; }
    public int stage() { return LctxNative.lctx_session_stage(ptr()); }
    public long nFed() { return LctxNative.lctx_session_n_fed(ptr()); }
    public String lastError() { return LctxNative.lctx_session_last_error(ptr()); }
    public void cancel() { LctxNative.lctx_session_cancel(ptr()); }

    /** Stage 1: append document tokens. */
    public void feed(int[] tokens) {
        label[0] = "feed";
        LctxNative.lctx_feed_chunk(ptr(), tokens);
    }

    /** Tokenizes text and feeds it, the rule of every binding: BOS (when the
     * model adds one) before the first chunk only, and special-token text such
     * as "&lt;|im_start|&gt;" is NOT parsed: a document is data, read as plain
     * text (to feed control tokens, tokenize with parseSpecial and call
     * {@link #feed}). Returns the token count. */
    public int feedText(String text) {
        int[] t = model.tokenize(text, nFed() == 0, false);
        feed(t);
        return t.length;
    }

    public void buildIndex() {
        label[0] = "build_index";
        LctxNative.lctx_build_index(ptr());
    }

    public void saveIndex(String path) { LctxNative.lctx_index_save(ptr(), path); }

    public Selection select(int[] query) {
        long[] out = new long[1];
        label[0] = "select";
        LctxNative.lctx_select(ptr(), query, out);
        return new Selection(new SWIGTYPE_p_lctx_selection(out[0], false));
    }

    public void recompute(Selection sel) {
        label[0] = "recompute";
        LctxNative.lctx_recompute(ptr(), sel.ptr());
    }

    public int decode(Sampling sampling) {
        lctx_sampling_params p = (sampling == null ? Sampling.greedy() : sampling).toNative();
        try {
            int[] tok = new int[1];
            LctxNative.lctx_decode(ptr(), p, tok);
            return tok[0];
        } finally {
            p.delete();
        }
    }

    /** Stage 5 with the caller's token (teacher forcing): returns the natural log of
     * its probability under the logits the next decode would sample from, then
     * appends it as if it had been sampled. */
    public float decodeToken(int token) {
        float[] logprob = new float[1];
        LctxNative.lctx_decode_token(ptr(), token, logprob);
        return logprob[0];
    }

    /** Every scored document token's score from the last select
     * (lctx_session_select_scores). raw: the method's score of each token;
     * ranked: what select ranked by (REFORM: the pooled scores; ILRe: raw
     * again). The first forcedFirst and last forcedLast tokens were gathered
     * whatever their scores. */
    public static final class SelectScores {
        public final float[] raw;
        public final float[] ranked;
        public final long forcedFirst;
        public final long forcedLast;

        SelectScores(float[] raw, float[] ranked, long[] forced) {
            this.raw = raw;
            this.ranked = ranked;
            this.forcedFirst = forced[0];
            this.forcedLast = forced[1];
        }
    }

    /** The scores behind the last successful select (REFORM, ILRe); an
     * LctxException with LCTX_ERR_UNSUPPORTED for other methods and
     * LCTX_ERR_STATE before a select has succeeded. */
    public SelectScores selectScores() {
        long[] forced = LctxNative.lctxsw_session_select_forced(ptr());
        return new SelectScores(LctxNative.lctx_session_select_scores(ptr(), false),
                LctxNative.lctx_session_select_scores(ptr(), true), forced);
    }

    /** What the latest step's attention could see (ReAttention,
     * lctx_session_attended): for each stored token (document, then question
     * and answer so far), the share of layers whose attention window held it,
     * in [0, 1]; all 0 before the first step. An LctxException with
     * LCTX_ERR_UNSUPPORTED for a method whose decode attends to its whole cache. */
    public float[] attended() {
        return LctxNative.lctx_session_attended(ptr());
    }

    /** lctx_refreshkv_stats plus the per-layer step counts. A layer step is one
     * layer of one decoded token: nFull + nPartial == nSteps * nLayer and
     * layerFull[l] + layerPartial[l] == nSteps. */
    public static final class RefreshKvStats {
        public final int nLayer;
        /** K in use (partial-cache slots per layer and KV head). */
        public final long partial;
        /** Decoded tokens. */
        public final long nSteps;
        public final long nFull;
        public final long nPartial;
        /** Mean over layers of nSteps / full steps of the layer. */
        public final double effectiveStride;
        public final double fullAttentionS;
        public final double partialAttentionS;
        public final double refreshS;
        public final long[] layerFull;
        public final long[] layerPartial;

        RefreshKvStats(lctx_refreshkv_stats st, long[] layerFull, long[] layerPartial) {
            nLayer = st.getN_layer();
            partial = st.getPartial();
            nSteps = st.getN_steps();
            nFull = st.getN_full();
            nPartial = st.getN_partial();
            effectiveStride = st.getEffective_stride();
            fullAttentionS = st.getFull_attention_s();
            partialAttentionS = st.getPartial_attention_s();
            refreshS = st.getRefresh_s();
            this.layerFull = layerFull;
            this.layerPartial = layerPartial;
        }
    }

    /** RefreshKV decoding statistics since the last recompute (sessions of
     * LCTX_METHOD_REFRESHKV, or REFORM/ILRe with refreshkv gathered); an
     * LctxException (LCTX_ERR_UNSUPPORTED) for other sessions. */
    public RefreshKvStats refreshkvStats() {
        lctx_refreshkv_stats st = new lctx_refreshkv_stats();
        try {
            LctxNative.lctx_session_refreshkv_stats(ptr(), st);
            return new RefreshKvStats(st, LctxNative.lctxsw_session_refreshkv_layer_steps(ptr(), true),
                    LctxNative.lctxsw_session_refreshkv_layer_steps(ptr(), false));
        } finally {
            st.delete();
        }
    }

    /** How the next questions decode, from the next recompute on (an answer in
     * progress keeps its decoding; the document is not read again). knobs not
     * null: RefreshKV with lctx_refreshkv_default_params edited by knobs, as
     * {@link Params#refreshkv}, e.g. {@code r -> { r.setPartial(8); r.setStride(3); }}
     * ({@code r -> {}}: the defaults; gathered is not read); null: dense
     * decoding. For sessions of LCTX_METHOD_FULL, LCTX_METHOD_REFRESHKV, REFORM
     * and ILRe; an LctxException with LCTX_ERR_UNSUPPORTED for others and
     * LCTX_ERR_INVALID_ARG for bad knobs (nothing changes on an error). */
    public void setRefreshkv(Consumer<lctx_refreshkv_params> knobs) {
        if (knobs == null) {
            LctxNative.lctx_session_set_refreshkv(ptr(), null);
            return;
        }
        lctx_refreshkv_params p = new lctx_refreshkv_params();
        try {
            LctxNative.lctx_refreshkv_default_params(p);
            knobs.accept(p);
            LctxNative.lctx_session_set_refreshkv(ptr(), p);
        } finally {
            p.delete();
        }
    }

    /** One backend op of a session (lctx_op_time). */
    public static final class OpTime {
        /** The Backend method's name: "matmul", "attention", "to_host", ... */
        public final String op;
        public final long calls;
        /** Wall time inside the op, summed over its calls. */
        public final double seconds;
        /** to_host, from_host, copy: bytes moved; alloc: bytes allocated; else 0. */
        public final long bytes;

        OpTime(lctx_op_time t) {
            op = t.getOp();
            calls = t.getCalls();
            seconds = t.getSeconds();
            bytes = t.getBytes();
        }
    }

    /** Where the session's time went, per backend op in the header's fixed
     * order (docs/profiling.md). Only for a session created while the
     * environment variable LCTX_PROFILE_OPS was set; an LctxException
     * (LCTX_ERR_UNSUPPORTED) for others. lifetimeS, when not null and not
     * empty, receives the session's lifetime in seconds. */
    public java.util.List<OpTime> opTimes(double[] lifetimeS) {
        long[] n = new long[1];
        double[] life = new double[1];
        LctxNative.lctx_session_op_times(ptr(), 0, null, n, life);
        java.util.List<OpTime> out = new java.util.ArrayList<>();
        lctx_op_time t = new lctx_op_time();
        try {
            for (long i = 0; i < n[0]; ++i) {
                LctxNative.lctx_session_op_times(ptr(), i, t, n, life);
                out.add(new OpTime(t));
            }
        } finally {
            t.delete();
        }
        if (lifetimeS != null && lifetimeS.length > 0) lifetimeS[0] = life[0];
        return out;
    }

    /** A copy of the logits the next decode samples from (empty before recompute). */
    public float[] logits() {
        float[] l = LctxNative.lctx_session_logits(ptr(), model.ptr());
        return l == null ? new float[0] : l;
    }

    /** Decodes up to maxTokens tokens (stops at end of generation, or before
     * the first of sampling's stop strings, which is not passed on), passing
     * each text piece to onPiece; UTF-8 split over tokens, and text that may
     * begin a stop string, is held back. */
    public void generate(int maxTokens, Sampling sampling, Consumer<String> onPiece) {
        StopFilter f = new StopFilter(sampling == null ? java.util.List.of() : sampling.stop);
        generatePieces(maxTokens, sampling, piece -> {
            String t = f.push(piece);
            if (!t.isEmpty()) onPiece.accept(t);
            return !f.done;
        });
        String t = f.flush();
        if (!t.isEmpty()) onPiece.accept(t);
    }

    private void generatePieces(int maxTokens, Sampling sampling, java.util.function.Predicate<String> onPiece) {
        CharsetDecoder dec = StandardCharsets.UTF_8.newDecoder()
                .onMalformedInput(CodingErrorAction.REPLACE).onUnmappableCharacter(CodingErrorAction.REPLACE);
        ByteBuffer pending = ByteBuffer.allocate(64);
        CharBuffer chars = CharBuffer.allocate(256);
        for (int i = 0; i < maxTokens; i++) {
            int tok = decode(sampling);
            if (model.isEog(tok)) break;
            byte[] piece = model.tokenToPiece(tok, false);
            if (pending.remaining() < piece.length) {
                ByteBuffer bigger = ByteBuffer.allocate(pending.capacity() + piece.length * 2);
                pending.flip();
                bigger.put(pending);
                pending = bigger;
            }
            pending.put(piece);
            pending.flip();
            if (chars.capacity() < pending.remaining() * 2) chars = CharBuffer.allocate(pending.remaining() * 2);
            chars.clear();
            dec.decode(pending, chars, false);
            pending.compact();
            chars.flip();
            if (chars.hasRemaining() && !onPiece.test(chars.toString())) return;
        }
        pending.flip();
        chars.clear();
        dec.decode(pending, chars, true);
        dec.flush(chars);
        chars.flip();
        if (chars.hasRemaining()) onPiece.test(chars.toString());
    }

    /** Seals the document on the first question, selects, recomputes and
     * streams the answer. Ask again for more questions on the same document. */
    public void ask(String question, int maxTokens, Sampling sampling, Consumer<String> onPiece) {
        if (stage() == lctx_stage.LCTX_STAGE_FEEDING) buildIndex();
        try (Selection sel = select(model.tokenize(question, false, true))) {
            recompute(sel);
        }
        generate(maxTokens, sampling, onPiece);
    }

    public String ask(String question, int maxTokens) {
        StringBuilder sb = new StringBuilder();
        ask(question, maxTokens, null, sb::append);
        return sb.toString();
    }
}
