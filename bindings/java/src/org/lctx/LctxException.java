package org.lctx;

import java.nio.charset.StandardCharsets;

/**
 * A failed lctx call: {@link #status()} is the C status (LCTX_ERR_*),
 * {@link #kind()} its {@link Status}, and the message is the library's
 * last-error text. Each status has its own subclass
 * ({@link InvalidArgException}, {@link StateException}, ...), so callers can
 * catch one kind.
 *
 * <p>Unchecked on purpose: most failures are programming errors (wrong stage,
 * bad token) or unrecoverable (bad file), callers that can recover catch it
 * by status, and lambdas passed to generate() stay simple.
 */
public class LctxException extends RuntimeException {
    /** The error statuses; {@link #kind()} is the name every binding uses. */
    public enum Status {
        INVALID_ARG(lctx_status.LCTX_ERR_INVALID_ARG),
        IO(lctx_status.LCTX_ERR_IO),
        FORMAT(lctx_status.LCTX_ERR_FORMAT),
        UNSUPPORTED(lctx_status.LCTX_ERR_UNSUPPORTED),
        OUT_OF_MEMORY(lctx_status.LCTX_ERR_OUT_OF_MEMORY),
        STATE(lctx_status.LCTX_ERR_STATE),
        BUFFER_TOO_SMALL(lctx_status.LCTX_ERR_BUFFER_TOO_SMALL),
        CANCELLED(lctx_status.LCTX_ERR_CANCELLED),
        CONTEXT_FULL(lctx_status.LCTX_ERR_CONTEXT_FULL),
        INTERNAL(lctx_status.LCTX_ERR_INTERNAL),
        /** A status newer than this binding. */
        OTHER(Integer.MIN_VALUE);

        public final int code;

        Status(int code) {
            this.code = code;
        }

        /** The LCTX_ERR_ suffix in lower case ("invalid_arg", "state", ...). */
        public String kind() {
            return name().toLowerCase(java.util.Locale.ROOT);
        }

        public static Status of(int code) {
            for (Status s : values()) if (s.code == code) return s;
            return OTHER;
        }
    }

    private final int status;

    public LctxException(int status, String message) {
        super(message);
        this.status = status;
    }

    /** Called from native code with the UTF-8 message bytes. */
    LctxException(int status, byte[] utf8) {
        this(status, new String(utf8, StandardCharsets.UTF_8));
    }

    /** The exception of a status, of its subclass (called from native code). */
    static LctxException of(int status, byte[] utf8) {
        String m = new String(utf8, StandardCharsets.UTF_8);
        switch (Status.of(status)) {
            case INVALID_ARG: return new InvalidArgException(status, m);
            case IO: return new IoException(status, m);
            case FORMAT: return new FormatException(status, m);
            case UNSUPPORTED: return new UnsupportedException(status, m);
            case OUT_OF_MEMORY: return new OutOfMemoryException(status, m);
            case STATE: return new StateException(status, m);
            case BUFFER_TOO_SMALL: return new BufferTooSmallException(status, m);
            case CANCELLED: return new CancelledException(status, m);
            case CONTEXT_FULL: return new ContextFullException(status, m);
            case INTERNAL: return new InternalException(status, m);
            default: return new LctxException(status, m);
        }
    }

    public int status() {
        return status;
    }

    /** The status as an enum. */
    public Status kind() {
        return Status.of(status);
    }

    public boolean isCancelled() {
        return status == lctx_status.LCTX_ERR_CANCELLED;
    }

    public static class InvalidArgException extends LctxException {
        public InvalidArgException(int s, String m) { super(s, m); }
    }

    public static class IoException extends LctxException {
        public IoException(int s, String m) { super(s, m); }
    }

    public static class FormatException extends LctxException {
        public FormatException(int s, String m) { super(s, m); }
    }

    public static class UnsupportedException extends LctxException {
        public UnsupportedException(int s, String m) { super(s, m); }
    }

    public static class OutOfMemoryException extends LctxException {
        public OutOfMemoryException(int s, String m) { super(s, m); }
    }

    public static class StateException extends LctxException {
        public StateException(int s, String m) { super(s, m); }
    }

    public static class BufferTooSmallException extends LctxException {
        public BufferTooSmallException(int s, String m) { super(s, m); }
    }

    public static class CancelledException extends LctxException {
        public CancelledException(int s, String m) { super(s, m); }
    }

    public static class ContextFullException extends LctxException {
        public ContextFullException(int s, String m) { super(s, m); }
    }

    public static class InternalException extends LctxException {
        public InternalException(int s, String m) { super(s, m); }
    }
}
