//! The generated FFI links and agrees with the header's macros and structs.
use lctx_sys::*;
use std::ffi::CStr;

#[test]
fn version_and_params_through_raw_ffi() {
    unsafe {
        assert_eq!(lctx_version_number() as u32, LCTX_VERSION_NUMBER);
        let v = CStr::from_ptr(lctx_version()).to_str().unwrap();
        assert_eq!(v, format!("{LCTX_VERSION_MAJOR}.{LCTX_VERSION_MINOR}.{LCTX_VERSION_PATCH}"));
        let mut p: lctx_session_params = std::mem::zeroed();
        lctx_session_default_params(&mut p);
        assert_eq!(p.struct_size as usize, std::mem::size_of::<lctx_session_params>());
        assert_eq!(p.method, LCTX_METHOD_REFORM); // the library default
        let mut s: lctx_sampling_params = std::mem::zeroed();
        lctx_sampling_default_params(&mut s);
        assert_eq!(s.struct_size as usize, std::mem::size_of::<lctx_sampling_params>());
        let mut m: lctx_model_params = std::mem::zeroed();
        lctx_model_default_params(&mut m);
        assert_eq!(m.struct_size as usize, std::mem::size_of::<lctx_model_params>());
        assert!(p.reform.is_null() && p.kv.is_null() && p.infllm.is_null());
        let mut r: lctx_reform_params = std::mem::zeroed();
        lctx_reform_default_params(&mut r);
        assert_eq!(r.struct_size as usize, std::mem::size_of::<lctx_reform_params>());
        let mut k: lctx_kv_params = std::mem::zeroed();
        lctx_kv_default_params(&mut k);
        assert_eq!(k.struct_size as usize, std::mem::size_of::<lctx_kv_params>());
        let mut i: lctx_infllm_params = std::mem::zeroed();
        lctx_infllm_default_params(&mut i);
        assert_eq!(i.struct_size as usize, std::mem::size_of::<lctx_infllm_params>());
        assert!(p.ilre.is_null());
        let mut l: lctx_ilre_params = std::mem::zeroed();
        lctx_ilre_default_params(&mut l);
        assert_eq!(l.struct_size as usize, std::mem::size_of::<lctx_ilre_params>());
        assert_eq!(l.retrieval_layer, -1);
        assert!(l.max_kernels.is_null() && l.avg_kernels.is_null() && l.profile_path.is_null());
        assert!(p.reattention.is_null() && p.refreshkv.is_null());
        let mut a: lctx_reattention_params = std::mem::zeroed();
        lctx_reattention_default_params(&mut a);
        assert_eq!(a.struct_size as usize, std::mem::size_of::<lctx_reattention_params>());
        assert_eq!((a.n_global, a.n_local, a.span, a.top_k, a.n_spans, a.chunk), (-1, -1, -1, -1, -1, -1));
        assert_eq!((a.reuse_steps, a.tile_max, a.store_max_ram), (1, false, 0));
        assert!(a.store_dir.is_null());
        let mut f: lctx_refreshkv_params = std::mem::zeroed();
        lctx_refreshkv_default_params(&mut f);
        assert_eq!(f.struct_size as usize, std::mem::size_of::<lctx_refreshkv_params>());
        assert_eq!((f.partial, f.stride, f.threshold, f.schedule), (0, 0, 0.0, LCTX_REFRESHKV_DYNAMIC));
        assert_eq!((f.pool_kernel, f.max_partial_run, f.gathered), (0, 0, false));
    }
}

#[test]
fn errors_through_raw_ffi() {
    unsafe {
        let mut model: *mut lctx_model = std::ptr::null_mut();
        let st = lctx_model_load(b"/nonexistent/m.gguf\0".as_ptr().cast(), std::ptr::null(), &mut model);
        assert_eq!(st, LCTX_ERR_IO);
        assert!(model.is_null());
        let msg = CStr::from_ptr(lctx_last_error()).to_string_lossy();
        assert!(msg.contains("/nonexistent/m.gguf"), "{msg}");
        assert!(!CStr::from_ptr(lctx_status_string(LCTX_ERR_FORMAT)).to_bytes().is_empty());
        lctx_model_free(std::ptr::null_mut()); // every *_free accepts NULL
        lctx_session_free(std::ptr::null_mut());
        lctx_selection_free(std::ptr::null_mut());
    }
}
