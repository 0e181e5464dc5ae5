package org.lctx;

import java.nio.charset.StandardCharsets;

/** Library-wide calls: version, status text, the log sink. */
public final class Lctx {
    private Lctx() {}

    public static final int LOG_DEBUG = lctx_log_level.LCTX_LOG_DEBUG;
    public static final int LOG_INFO = lctx_log_level.LCTX_LOG_INFO;
    public static final int LOG_WARN = lctx_log_level.LCTX_LOG_WARN;
    public static final int LOG_ERROR = lctx_log_level.LCTX_LOG_ERROR;

    /** Receives library log messages; may be called from worker threads. */
    @FunctionalInterface
    public interface LogHandler {
        void log(int level, String message);
    }

    public static String version() {
        return LctxNative.lctx_version();
    }

    public static int versionNumber() {
        return LctxNative.lctx_version_number();
    }

    public static String buildInfo() {
        return LctxNative.lctx_build_info();
    }

    public static String statusString(int status) {
        return LctxNative.lctx_status_string(status);
    }

    public static String lastError() {
        return LctxNative.lctx_last_error();
    }

    /** Number of methods the native library knows (values 0 .. n-1, lctx_method). */
    public static int methodCount() {
        return LctxNative.lctx_method_count();
    }

    /** Registry name of a method ("reform"), or null for a value the library does not know. */
    public static String methodName(int method) {
        return LctxNative.lctx_method_name(method);
    }

    /** One line describing a method, or null for a value the library does not know. */
    public static String methodDescription(int method) {
        return LctxNative.lctx_method_description(method);
    }

    /** True when sessions can be created with the method. */
    public static boolean methodIsImplemented(int method) {
        return LctxNative.lctx_method_is_implemented(method);
    }

    /** The lctx_method value of a registry name (any case); LctxException if unknown. */
    public static int methodFromName(String name) {
        int[] out = new int[1];
        LctxNative.lctx_method_from_name(name, out);
        return out[0];
    }

    /** Sends messages at or above minLevel to handler; null silences the library. */
    public static void setLogHandler(LogHandler handler, int minLevel) {
        LctxNative.lctx_log_set(handler == null ? null : new LogAdapter(handler), minLevel);
    }

    /** The object the native trampoline calls (by method name and signature). */
    static final class LogAdapter {
        private final LogHandler handler;

        LogAdapter(LogHandler handler) {
            this.handler = handler;
        }

        void onLog(int level, byte[] utf8) {
            handler.log(level, new String(utf8, StandardCharsets.UTF_8));
        }
    }
}
