package org.lctx;

/** The document tokens chosen for a question. */
public final class Selection implements AutoCloseable {
    private SWIGTYPE_p_lctx_selection ptr;

    Selection(SWIGTYPE_p_lctx_selection ptr) {
        this.ptr = ptr;
    }

    SWIGTYPE_p_lctx_selection ptr() {
        if (ptr == null) throw new IllegalStateException("the selection is closed");
        return ptr;
    }

    public long size() { return LctxNative.lctx_selection_size(ptr()); }

    /** Document positions, ascending. */
    public long[] positions() { return LctxNative.lctx_selection_positions(ptr()); }

    public float[] scores() { return LctxNative.lctx_selection_scores(ptr()); }

    @Override
    public void close() {
        if (ptr != null) {
            LctxNative.lctx_selection_free(ptr);
            ptr = null;
        }
    }
}
