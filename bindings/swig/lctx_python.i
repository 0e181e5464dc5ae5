/* lctx_python.i — Python typemaps and callbacks for lctx.i (included by it). */

%{
#define PY_SSIZE_T_CLEAN

/* lctx.Error and one subclass per status (index = -status); created in %init. */
static PyObject *lctxsw_errors[11];

/* An exception raised by a Python progress callback, re-raised by the call
 * that the callback cancelled. Kept per thread: callbacks run on the caller's. */
static __thread PyObject *lctxsw_cb_type, *lctxsw_cb_value, *lctxsw_cb_tb;

static void lctxsw_raise(lctx_status st) {
    if (st == LCTX_ERR_CANCELLED && lctxsw_cb_type) {
        PyErr_Restore(lctxsw_cb_type, lctxsw_cb_value, lctxsw_cb_tb);
        lctxsw_cb_type = lctxsw_cb_value = lctxsw_cb_tb = NULL;
        return;
    }
    const char *msg = lctx_last_error();
    if (!msg || !*msg) msg = lctx_status_string(st);
    PyObject *type = (st < 0 && st > -11 && lctxsw_errors[-st]) ? lctxsw_errors[-st] : lctxsw_errors[0];
    PyObject *text = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
    PyObject *exc = text ? PyObject_CallFunctionObjArgs(type, text, NULL) : NULL;
    Py_XDECREF(text);
    if (!exc) return; /* the error of building it is set */
    PyObject *code = PyLong_FromLong((long)st);
    if (code) { PyObject_SetAttrString(exc, "status", code); Py_DECREF(code); }
    PyErr_SetObject(type, exc);
    Py_DECREF(exc);
}

static PyObject *lctxsw_array(const char *typecode, const void *data, size_t n_bytes) {
    PyObject *mod = PyImport_ImportModule("array");
    if (!mod) return NULL;
    PyObject *raw = PyBytes_FromStringAndSize(data ? (const char *)data : "", (Py_ssize_t)n_bytes);
    PyObject *arr = raw ? PyObject_CallMethod(mod, "array", "sO", typecode, raw) : NULL;
    Py_XDECREF(raw);
    Py_DECREF(mod);
    return arr;
}

/* ---- callbacks ---- */
static PyObject *lctxsw_log_callable; /* read and written with the GIL held */

static void lctxsw_log_trampoline(lctx_log_level level, const char *message, void *user_data) {
    (void)user_data;
    if (!Py_IsInitialized()) return;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *cb = lctxsw_log_callable;
    if (cb) {
        Py_INCREF(cb);
        PyObject *r = PyObject_CallFunction(cb, "iy", (int)level, message ? message : "");
        if (!r) PyErr_WriteUnraisable(cb); else Py_DECREF(r);
        Py_DECREF(cb);
    }
    PyGILState_Release(g);
}

static int lctxsw_progress_trampoline(float done, void *user_data) {
    PyGILState_STATE g = PyGILState_Ensure();
    int stop = 1;
    PyObject *r = PyObject_CallFunction((PyObject *)user_data, "d", (double)done);
    if (r) {
        stop = PyObject_IsTrue(r) == 1;
        Py_DECREF(r);
    } else if (!lctxsw_cb_type) {
        PyErr_Fetch(&lctxsw_cb_type, &lctxsw_cb_value, &lctxsw_cb_tb);
    } else {
        PyErr_Clear();
    }
    PyGILState_Release(g);
    return stop;
}
%}

/* ---- statuses become exceptions ---- */
%typemap(out) lctx_status {
    if ($1 < 0) { lctxsw_raise($1); SWIG_fail; }
    $result = SWIG_Py_Void();
}

/* ---- handle outputs: the call returns the handle ---- */
%define LCTX_OUT_HANDLE(TYPE)
%typemap(in, numinputs=0) TYPE **out (TYPE *tmp = NULL) { $1 = &tmp; }
%typemap(argout) TYPE **out {
    $result = SWIG_Python_AppendOutput($result, SWIG_NewPointerObj(SWIG_as_voidptr(*$1), $*1_descriptor, 0));
}
%enddef
LCTX_OUT_HANDLE(lctx_model)
LCTX_OUT_HANDLE(lctx_session)
LCTX_OUT_HANDLE(lctx_selection)

/* ---- token arrays in: any int32 buffer (array('i'), numpy int32) without a
 * copy, or any sequence of ints ---- */
%typemap(in) (const lctx_token *tokens, size_t n_tokens) (Py_buffer view, int have_view = 0, lctx_token *copy = NULL),
             (const lctx_token *query, size_t n_query) (Py_buffer view, int have_view = 0, lctx_token *copy = NULL) {
    if (PyObject_CheckBuffer($input) && !PyBytes_Check($input) && !PyByteArray_Check($input)) {
        if (PyObject_GetBuffer($input, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) SWIG_fail;
        have_view = 1;
        const char *f = view.format ? view.format : "B";
        if (*f == '@' || *f == '=' || *f == '<') ++f;
        if (view.itemsize != 4 || !(f[0] == 'i' || f[0] == 'l') || f[1] != 0) {
            PyErr_Format(PyExc_TypeError, "token buffer must hold int32 items (got format '%s', itemsize %zd)",
                         view.format ? view.format : "B", view.itemsize);
            SWIG_fail;
        }
        $1 = (lctx_token *)view.buf;
        $2 = (size_t)(view.len / 4);
    } else {
        PyObject *seq = PySequence_Fast($input, "tokens must be an int32 buffer or a sequence of ints");
        if (!seq) SWIG_fail;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        copy = (lctx_token *)malloc((size_t)(n ? n : 1) * sizeof(lctx_token));
        if (!copy) { Py_DECREF(seq); PyErr_NoMemory(); SWIG_fail; }
        for (Py_ssize_t i = 0; i < n; ++i) {
            long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
            if (v == -1 && PyErr_Occurred()) { Py_DECREF(seq); SWIG_fail; }
            if (v < INT32_MIN || v > INT32_MAX) {
                Py_DECREF(seq);
                PyErr_SetString(PyExc_OverflowError, "token id out of int32 range");
                SWIG_fail;
            }
            copy[i] = (lctx_token)v;
        }
        Py_DECREF(seq);
        $1 = copy;
        $2 = (size_t)n;
    }
}
%typemap(freearg) (const lctx_token *tokens, size_t n_tokens), (const lctx_token *query, size_t n_query) {
    if (have_view$argnum) PyBuffer_Release(&view$argnum);
    free(copy$argnum);
}

/* ---- text in: str (as UTF-8) or bytes ---- */
%typemap(in) (const char *text, size_t text_len) {
    Py_ssize_t len = 0;
    if (PyUnicode_Check($input)) {
        $1 = (char *)PyUnicode_AsUTF8AndSize($input, &len);
        if (!$1) SWIG_fail;
    } else if (PyBytes_Check($input)) {
        char *p = NULL;
        if (PyBytes_AsStringAndSize($input, &p, &len) != 0) SWIG_fail;
        $1 = p;
    } else {
        PyErr_SetString(PyExc_TypeError, "text must be str or bytes");
        SWIG_fail;
    }
    $2 = (size_t)len;
}

/* ---- raw bytes in (model from memory): any contiguous buffer, no copy ---- */
%typemap(in) (const void *data, size_t size) (Py_buffer view, int have_view = 0) {
    if (PyObject_GetBuffer($input, &view, PyBUF_C_CONTIGUOUS) != 0) SWIG_fail;
    have_view = 1;
    $1 = view.buf;
    $2 = (size_t)view.len;
}
%typemap(freearg) (const void *data, size_t size) { if (have_view$argnum) PyBuffer_Release(&view$argnum); }

/* ---- a list of str (chat messages flattened) ---- */
%typemap(in) (const char *const *strings, size_t n_strings) (PyObject *seq = NULL, const char **strs = NULL) {
    seq = PySequence_Fast($input, "expected a sequence of str");
    if (!seq) SWIG_fail;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    strs = (const char **)calloc((size_t)(n ? n : 1), sizeof(char *));
    if (!strs) { PyErr_NoMemory(); SWIG_fail; }
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyUnicode_Check(o)) { PyErr_SetString(PyExc_TypeError, "messages must be str"); SWIG_fail; }
        strs[i] = PyUnicode_AsUTF8(o); /* owned by o, which seq keeps alive */
        if (!strs[i]) SWIG_fail;
    }
    $1 = ($1_ltype)strs;
    $2 = (size_t)n;
}
%typemap(freearg) (const char *const *strings, size_t n_strings) { free((void *)strs$argnum); Py_XDECREF(seq$argnum); }

/* ---- owned results of the helpers ---- */
%typemap(out) lctxsw_bytes {
    if ($1.status < 0) { lctxsw_raise($1.status); SWIG_fail; }
    if (!$1.data) { $result = SWIG_Py_Void(); }
    else { $result = PyBytes_FromStringAndSize($1.data, (Py_ssize_t)$1.n); free($1.data); if (!$result) SWIG_fail; }
}
%typemap(out) lctxsw_tokens {
    if ($1.status < 0) { lctxsw_raise($1.status); SWIG_fail; }
    $result = lctxsw_array("i", $1.data, $1.n * sizeof(lctx_token)); free($1.data);
    if (!$result) SWIG_fail;
}
%typemap(out) lctxsw_positions {
    if ($1.status < 0) { lctxsw_raise($1.status); SWIG_fail; }
    $result = lctxsw_array("q", $1.data, $1.n * sizeof(int64_t)); free($1.data);
    if (!$result) SWIG_fail;
}
%typemap(out) lctxsw_floats {
    if ($1.status < 0) { lctxsw_raise($1.status); SWIG_fail; }
    $result = lctxsw_array("f", $1.data, $1.n * sizeof(float)); free($1.data);
    if (!$result) SWIG_fail;
}

/* ---- callbacks (these touch Python objects: they keep the GIL) ---- */
%nothread lctxsw_log_set;
%nothread lctxsw_session_params_set_progress;
%inline %{
/* fn(level: int, message: bytes) or None; messages below min_level are dropped. */
static void lctxsw_log_set(PyObject *fn, lctx_log_level min_level) {
    PyObject *old = lctxsw_log_callable;
    if (fn == Py_None) {
        lctx_log_set(NULL, min_level, NULL);
        lctxsw_log_callable = NULL;
    } else {
        Py_INCREF(fn);
        lctxsw_log_callable = fn;
        lctx_log_set(lctxsw_log_trampoline, min_level, NULL);
    }
    Py_XDECREF(old);
}
/* fn(done: float) -> bool (True cancels), or None. The caller keeps fn alive
 * for as long as a session created with these params exists. */
static void lctxsw_session_params_set_progress(lctx_session_params *params, PyObject *fn) {
    if (!params) return;
    if (fn == Py_None) { params->progress = NULL; params->progress_user_data = NULL; }
    else { params->progress = lctxsw_progress_trampoline; params->progress_user_data = fn; }
}
%}

%init %{
    {
        static const char *names[11] = {
            "lctx.Error", "lctx.InvalidArgumentError", "lctx.IoError", "lctx.FormatError",
            "lctx.UnsupportedError", "lctx.OutOfMemoryError", "lctx.StateError",
            "lctx.BufferTooSmallError", "lctx.CancelledError", "lctx.ContextFullError",
            "lctx.InternalError"};
        for (int i = 0; i < 11; ++i) {
            PyObject *base = i == 0 ? NULL : lctxsw_errors[0];
            if (i == 1) base = PyTuple_Pack(2, lctxsw_errors[0], PyExc_ValueError);
            lctxsw_errors[i] = PyErr_NewException(names[i], base, NULL);
            if (i == 1) Py_XDECREF(base);
            if (!lctxsw_errors[i]) return NULL;
            PyDict_SetItemString(d, names[i] + 5, lctxsw_errors[i]);
        }
    }
%}
