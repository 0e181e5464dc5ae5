//! Raw bindings to the lctx C API (`include/lctx.h`), generated at build time
//! by the bindgen CLI (see build.rs). Enum values are plain constants
//! (`LCTX_OK`, `LCTX_METHOD_REFORM`, ...) because the C library may return
//! values added after this crate was built. Use the `lctx` crate for a safe API.
#![allow(non_upper_case_globals, non_camel_case_types, non_snake_case, dead_code)]

include!(concat!(env!("OUT_DIR"), "/lctx_bindings.rs"));
