package org.lctx;

import java.nio.charset.StandardCharsets;

/**
 * A failed lctx call: {@link #status()} is the C status (LCTX_ERR_*) and the
 * message is the library's last-error text.
 *
 * <p>Unchecked on purpose: most failures are programming errors (wrong stage,
 * bad token) or unrecoverable (bad file), callers that can recover catch it
 * by status, and lambdas passed to generate() stay simple.
 */
public class LctxException extends RuntimeException {
    private final int status;

    public LctxException(int status, String message) {
        super(message);
        this.status = status;
    }

    /** Called from native code with the UTF-8 message bytes. */
    LctxException(int status, byte[] utf8) {
        this(status, new String(utf8, StandardCharsets.UTF_8));
    }

    public int status() {
        return status;
    }

    public boolean isCancelled() {
        return status == lctx_status.LCTX_ERR_CANCELLED;
    }
}
