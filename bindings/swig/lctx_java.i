/* lctx_java.i — Java (JNI) typemaps and callbacks for lctx.i (included by it).
 * Generated classes live in package org.lctx next to the idiomatic classes
 * (Model, Session, ...), which use the raw LctxNative calls. */

%include "enumtypeunsafe.swg"   /* C enums as int constants */
%javaconst(1);
%apply int64_t { uint64_t };     /* no BigInteger for counts and seeds */

%begin %{
#define _GNU_SOURCE /* PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP */
%}
%{
#include <pthread.h>

static JavaVM *lctxsw_jvm;

/* A Throwable raised by a Java progress callback, rethrown by the call that
 * the callback cancelled. Per thread: progress runs on the caller's thread. */
static __thread jthrowable lctxsw_cb_exc;

static void lctxsw_throw(JNIEnv *jenv, lctx_status st) {
    if (st == LCTX_ERR_CANCELLED && lctxsw_cb_exc) {
        jthrowable t = (jthrowable)(*jenv)->NewLocalRef(jenv, lctxsw_cb_exc);
        (*jenv)->DeleteGlobalRef(jenv, lctxsw_cb_exc);
        lctxsw_cb_exc = NULL;
        (*jenv)->Throw(jenv, t);
        return;
    }
    const char *msg = lctx_last_error();
    if (!msg || !*msg) msg = lctx_status_string(st);
    jclass cls = (*jenv)->FindClass(jenv, "org/lctx/LctxException");
    if (!cls) return;
    /* LctxException.of picks the subclass of the status (InvalidArgException, ...). */
    jmethodID of = (*jenv)->GetStaticMethodID(jenv, cls, "of", "(I[B)Lorg/lctx/LctxException;");
    jsize n = (jsize)strlen(msg);
    jbyteArray bytes = (*jenv)->NewByteArray(jenv, n);
    if (!of || !bytes) return;
    (*jenv)->SetByteArrayRegion(jenv, bytes, 0, n, (const jbyte *)msg);
    jobject exc = (*jenv)->CallStaticObjectMethod(jenv, cls, of, (jint)st, bytes);
    if (exc) (*jenv)->Throw(jenv, (jthrowable)exc);
}

static JNIEnv *lctxsw_env(void) {
    JNIEnv *env = NULL;
    if (!lctxsw_jvm) return NULL;
    if ((*lctxsw_jvm)->GetEnv(lctxsw_jvm, (void **)&env, JNI_VERSION_1_8) == JNI_EDETACHED)
        (*lctxsw_jvm)->AttachCurrentThreadAsDaemon(lctxsw_jvm, (void **)&env, NULL);
    return env;
}

/* Log sink: a global ref to an object with `void onLog(int, byte[])`.
 * The log callback may come from any thread, so the ref is swapped and used
 * under a (recursive) lock. */
static pthread_mutex_t lctxsw_log_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static jobject lctxsw_log_obj;

static void lctxsw_log_trampoline(lctx_log_level level, const char *message, void *user_data) {
    (void)user_data;
    pthread_mutex_lock(&lctxsw_log_lock);
    JNIEnv *env = lctxsw_log_obj ? lctxsw_env() : NULL;
    if (env && !(*env)->ExceptionCheck(env)) {
        jclass cls = (*env)->GetObjectClass(env, lctxsw_log_obj);
        jmethodID mid = (*env)->GetMethodID(env, cls, "onLog", "(I[B)V");
        jsize n = message ? (jsize)strlen(message) : 0;
        jbyteArray bytes = mid ? (*env)->NewByteArray(env, n) : NULL;
        if (bytes) {
            (*env)->SetByteArrayRegion(env, bytes, 0, n, (const jbyte *)message);
            (*env)->CallVoidMethod(env, lctxsw_log_obj, mid, (jint)level, bytes);
            (*env)->DeleteLocalRef(env, bytes);
        }
        if ((*env)->ExceptionCheck(env)) (*env)->ExceptionClear(env); /* a log sink must not fail calls */
        (*env)->DeleteLocalRef(env, cls);
    }
    pthread_mutex_unlock(&lctxsw_log_lock);
}

/* Progress: user_data is a global ref to an object with `boolean onProgress(float)`. */
static int lctxsw_progress_trampoline(float done, void *user_data) {
    JNIEnv *env = lctxsw_env();
    if (!env || (*env)->ExceptionCheck(env)) return 1;
    jobject obj = (jobject)user_data;
    jclass cls = (*env)->GetObjectClass(env, obj);
    jmethodID mid = (*env)->GetMethodID(env, cls, "onProgress", "(F)Z");
    (*env)->DeleteLocalRef(env, cls);
    if (!mid) { (*env)->ExceptionClear(env); return 1; }
    jboolean stop = (*env)->CallBooleanMethod(env, obj, mid, (jfloat)done);
    jthrowable exc = (*env)->ExceptionOccurred(env);
    if (exc) {
        (*env)->ExceptionClear(env);
        if (!lctxsw_cb_exc) lctxsw_cb_exc = (jthrowable)(*env)->NewGlobalRef(env, exc);
        (*env)->DeleteLocalRef(env, exc);
        return 1;
    }
    return stop ? 1 : 0;
}
%}

/* ---- statuses become LctxException (unchecked) ---- */
%typemap(jni) lctx_status "jint"
%typemap(jtype) lctx_status "int"
%typemap(jstype) lctx_status "int"
%typemap(in) lctx_status %{ $1 = (lctx_status)$input; %}
%typemap(javain) lctx_status "$javainput"
%typemap(out) lctx_status %{
    if ($1 < 0) { lctxsw_throw(jenv, $1); return $null; }
    $result = (jint)$1;
%}
%typemap(javaout) lctx_status { return $jnicall; }

/* ---- handle outputs: a long[1] receives the pointer ---- */
%define LCTX_OUT_HANDLE(TYPE)
%typemap(jni) TYPE **out "jlongArray"
%typemap(jtype) TYPE **out "long[]"
%typemap(jstype) TYPE **out "long[]"
%typemap(javain) TYPE **out "$javainput"
%typemap(in) TYPE **out (TYPE *tmp = NULL) {
    if (!$input || (*jenv)->GetArrayLength(jenv, $input) < 1) {
        SWIG_JavaThrowException(jenv, SWIG_JavaIllegalArgumentException, "out must be a long[1]");
        return $null;
    }
    $1 = &tmp;
}
%typemap(argout) TYPE **out {
    jlong v = (jlong)(intptr_t)tmp$argnum;
    (*jenv)->SetLongArrayRegion(jenv, $input, 0, 1, &v);
}
%enddef
LCTX_OUT_HANDLE(lctx_model)
LCTX_OUT_HANDLE(lctx_session)
LCTX_OUT_HANDLE(lctx_selection)

/* ---- int[] token inputs (pinned or copied once by the JVM, never per element) ---- */
%typemap(jni) (const lctx_token *tokens, size_t n_tokens), (const lctx_token *query, size_t n_query) "jintArray"
%typemap(jtype) (const lctx_token *tokens, size_t n_tokens), (const lctx_token *query, size_t n_query) "int[]"
%typemap(jstype) (const lctx_token *tokens, size_t n_tokens), (const lctx_token *query, size_t n_query) "int[]"
%typemap(javain) (const lctx_token *tokens, size_t n_tokens), (const lctx_token *query, size_t n_query) "$javainput"
%typemap(in) (const lctx_token *tokens, size_t n_tokens), (const lctx_token *query, size_t n_query) {
    $1 = NULL; $2 = 0;
    if ($input) {
        $2 = (size_t)(*jenv)->GetArrayLength(jenv, $input);
        $1 = (lctx_token *)(*jenv)->GetIntArrayElements(jenv, $input, NULL);
        if (!$1) return $null;
    }
}
%typemap(freearg) (const lctx_token *tokens, size_t n_tokens), (const lctx_token *query, size_t n_query) {
    if ($1) (*jenv)->ReleaseIntArrayElements(jenv, $input, (jint *)$1, JNI_ABORT);
}

/* ---- byte[] inputs: UTF-8 text, model images ---- */
%typemap(jni) (const char *text, size_t text_len), (const void *data, size_t size) "jbyteArray"
%typemap(jtype) (const char *text, size_t text_len), (const void *data, size_t size) "byte[]"
%typemap(jstype) (const char *text, size_t text_len), (const void *data, size_t size) "byte[]"
%typemap(javain) (const char *text, size_t text_len), (const void *data, size_t size) "$javainput"
%typemap(in) (const char *text, size_t text_len), (const void *data, size_t size) {
    $1 = NULL; $2 = 0;
    if ($input) {
        $2 = (size_t)(*jenv)->GetArrayLength(jenv, $input);
        $1 = ($1_ltype)(*jenv)->GetByteArrayElements(jenv, $input, NULL);
        if (!$1) return $null;
    }
}
%typemap(freearg) (const char *text, size_t text_len), (const void *data, size_t size) {
    if ($1) (*jenv)->ReleaseByteArrayElements(jenv, $input, (jbyte *)$1, JNI_ABORT);
}

/* ---- String[] (chat messages flattened role, content, ...) ---- */
%typemap(jni) (const char *const *strings, size_t n_strings) "jobjectArray"
%typemap(jtype) (const char *const *strings, size_t n_strings) "String[]"
%typemap(jstype) (const char *const *strings, size_t n_strings) "String[]"
%typemap(javain) (const char *const *strings, size_t n_strings) "$javainput"
%typemap(in) (const char *const *strings, size_t n_strings) (const char **strs = NULL, jsize count = 0) {
    count = $input ? (*jenv)->GetArrayLength(jenv, $input) : 0;
    strs = (const char **)calloc((size_t)count + 1, sizeof(char *));
    for (jsize i = 0; strs && i < count; ++i) {
        jstring js = (jstring)(*jenv)->GetObjectArrayElement(jenv, $input, i);
        strs[i] = js ? (*jenv)->GetStringUTFChars(jenv, js, NULL) : NULL;
        if (!strs[i]) { strs[i] = ""; }
    }
    $1 = ($1_ltype)strs;
    $2 = (size_t)count;
}
%typemap(freearg) (const char *const *strings, size_t n_strings) {
    for (jsize i = 0; strs$argnum && i < count$argnum; ++i) {
        jstring js = (jstring)(*jenv)->GetObjectArrayElement(jenv, $input, i);
        if (js) (*jenv)->ReleaseStringUTFChars(jenv, js, strs$argnum[i]);
    }
    free((void *)strs$argnum);
}

/* ---- owned results of the helpers ---- */
%define LCTX_ARRAY_OUT(TYPE, JNITYPE, JTYPE, NEWFN, SETFN, CTYPE)
%typemap(jni) TYPE #JNITYPE
%typemap(jtype) TYPE #JTYPE
%typemap(jstype) TYPE #JTYPE
%typemap(javaout) TYPE { return $jnicall; }
%typemap(out) TYPE {
    if ($1.status < 0) { free($1.data); lctxsw_throw(jenv, $1.status); return $null; }
    if (!$1.data) { $result = NULL; }
    else {
        $result = (*jenv)->NEWFN(jenv, (jsize)$1.n);
        if ($result) (*jenv)->SETFN(jenv, $result, 0, (jsize)$1.n, (const CTYPE *)$1.data);
        free($1.data);
    }
}
%enddef
LCTX_ARRAY_OUT(lctxsw_bytes, jbyteArray, byte[], NewByteArray, SetByteArrayRegion, jbyte)
LCTX_ARRAY_OUT(lctxsw_tokens, jintArray, int[], NewIntArray, SetIntArrayRegion, jint)
LCTX_ARRAY_OUT(lctxsw_positions, jlongArray, long[], NewLongArray, SetLongArrayRegion, jlong)
LCTX_ARRAY_OUT(lctxsw_floats, jfloatArray, float[], NewFloatArray, SetFloatArrayRegion, jfloat)

/* ---- callbacks ---- */
%typemap(in, numinputs=0) JNIEnv * %{ $1 = jenv; %}
%typemap(jni) jobject "jobject"
%typemap(jtype) jobject "Object"
%typemap(jstype) jobject "Object"
%typemap(javain) jobject "$javainput"
%typemap(in) jobject %{ $1 = $input; %}

%inline %{
/* handler: an object with `void onLog(int level, byte[] utf8)`, or null. */
static void lctxsw_log_set(JNIEnv *jenv, jobject handler, lctx_log_level min_level) {
    if (!lctxsw_jvm) (*jenv)->GetJavaVM(jenv, &lctxsw_jvm);
    pthread_mutex_lock(&lctxsw_log_lock);
    if (lctxsw_log_obj) (*jenv)->DeleteGlobalRef(jenv, lctxsw_log_obj);
    lctxsw_log_obj = handler ? (*jenv)->NewGlobalRef(jenv, handler) : NULL;
    lctx_log_set(handler ? lctxsw_log_trampoline : NULL, min_level, NULL);
    pthread_mutex_unlock(&lctxsw_log_lock);
}
/* listener: an object with `boolean onProgress(float done)` (true cancels),
 * or null. Returns a global reference that the caller frees with
 * lctxsw_global_ref_free after the last session made with params is freed. */
static jlong lctxsw_session_params_set_progress(JNIEnv *jenv, lctx_session_params *params, jobject listener) {
    if (!lctxsw_jvm) (*jenv)->GetJavaVM(jenv, &lctxsw_jvm);
    if (!params) return 0;
    jobject ref = listener ? (*jenv)->NewGlobalRef(jenv, listener) : NULL;
    params->progress = ref ? lctxsw_progress_trampoline : NULL;
    params->progress_user_data = ref;
    return (jlong)(intptr_t)ref;
}
static void lctxsw_global_ref_free(JNIEnv *jenv, jlong ref) {
    if (ref) (*jenv)->DeleteGlobalRef(jenv, (jobject)(intptr_t)ref);
}
%}

/* The JNI class loads the native library before its first call. */
%pragma(java) jniclasscode=%{
  static { NativeLoader.load(); }
%}
