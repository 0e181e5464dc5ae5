//! Session: one document read with one method, then questioned.
use crate::error::{check, Error, Result, Status};
use crate::model::{cstring, Model};
use crate::{c_text, sys, Token};
use std::any::Any;
use std::cell::Cell;
use std::ffi::CString;
use std::marker::PhantomData;
use std::os::raw::{c_int, c_void};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Method of reading a long document (lctx_method).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Full,
    Reform,
    Ilre,
    ReAttention,
    RefreshKv,
    Truncate,
    Streaming,
    H2o,
    Tova,
    SnapKv,
    InfiniPot,
    InfLlm,
    /// Any other lctx_method value (the library refuses unimplemented ones).
    Other(i32),
}

impl Method {
    /// Every method of this crate, in value order (a test checks it against
    /// the library's registry).
    pub const ALL: [Method; 12] = [
        Method::Full,
        Method::Reform,
        Method::Ilre,
        Method::ReAttention,
        Method::RefreshKv,
        Method::Truncate,
        Method::Streaming,
        Method::H2o,
        Method::Tova,
        Method::SnapKv,
        Method::InfiniPot,
        Method::InfLlm,
    ];

    /// The lctx_method value.
    pub fn value(self) -> i32 {
        self.raw() as i32
    }

    /// The method of an lctx_method value (`Other` when this crate does not know it).
    pub fn from_value(v: i32) -> Method {
        Method::from_raw(v as sys::lctx_method)
    }

    /// The registry's name ("reform"); None for a value the library does not know.
    pub fn name(self) -> Option<String> {
        let p = unsafe { sys::lctx_method_name(self.raw()) };
        (!p.is_null()).then(|| c_text(p))
    }

    /// One line about the method from the registry; None for an unknown value.
    pub fn description(self) -> Option<String> {
        let p = unsafe { sys::lctx_method_description(self.raw()) };
        (!p.is_null()).then(|| c_text(p))
    }

    /// Whether the library creates sessions with this method.
    pub fn is_implemented(self) -> bool {
        unsafe { sys::lctx_method_is_implemented(self.raw()) }
    }

    /// The method of a registry name (any case).
    pub fn from_name(name: &str) -> Result<Method> {
        let c = cstring(name, "method name")?;
        let mut out: sys::lctx_method = sys::LCTX_METHOD_FULL;
        check(unsafe { sys::lctx_method_from_name(c.as_ptr(), &mut out) })?;
        Ok(Method::from_raw(out))
    }

    /// Number of methods the library knows (values 0 .. n-1).
    pub fn count() -> i32 {
        unsafe { sys::lctx_method_count() }
    }

    fn raw(self) -> sys::lctx_method {
        match self {
            Method::Full => sys::LCTX_METHOD_FULL,
            Method::Reform => sys::LCTX_METHOD_REFORM,
            Method::Ilre => sys::LCTX_METHOD_ILRE,
            Method::ReAttention => sys::LCTX_METHOD_REATTENTION,
            Method::RefreshKv => sys::LCTX_METHOD_REFRESHKV,
            Method::Truncate => sys::LCTX_METHOD_TRUNCATE,
            Method::Streaming => sys::LCTX_METHOD_STREAMING,
            Method::H2o => sys::LCTX_METHOD_H2O,
            Method::Tova => sys::LCTX_METHOD_TOVA,
            Method::SnapKv => sys::LCTX_METHOD_SNAPKV,
            Method::InfiniPot => sys::LCTX_METHOD_INFINIPOT,
            Method::InfLlm => sys::LCTX_METHOD_INFLLM,
            Method::Other(v) => v as sys::lctx_method,
        }
    }
    fn from_raw(v: sys::lctx_method) -> Method {
        match v {
            sys::LCTX_METHOD_FULL => Method::Full,
            sys::LCTX_METHOD_REFORM => Method::Reform,
            sys::LCTX_METHOD_ILRE => Method::Ilre,
            sys::LCTX_METHOD_REATTENTION => Method::ReAttention,
            sys::LCTX_METHOD_REFRESHKV => Method::RefreshKv,
            sys::LCTX_METHOD_TRUNCATE => Method::Truncate,
            sys::LCTX_METHOD_STREAMING => Method::Streaming,
            sys::LCTX_METHOD_H2O => Method::H2o,
            sys::LCTX_METHOD_TOVA => Method::Tova,
            sys::LCTX_METHOD_SNAPKV => Method::SnapKv,
            sys::LCTX_METHOD_INFINIPOT => Method::InfiniPot,
            sys::LCTX_METHOD_INFLLM => Method::InfLlm,
            v => Method::Other(v as i32),
        }
    }
}

/// Stage of a session, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Feeding,
    Indexed,
    Selected,
    Decoding,
    Other(i32),
}

/// Element type of a session's KV caches (lctx_kv_type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvType {
    /// 32-bit floats (the default).
    F32,
    /// 16-bit floats: half the memory (docs/kv-storage.md has the effect).
    F16,
    /// int8 codes and a scale per row: about a quarter of the memory, lossy,
    /// CPU backend only (docs/kv-storage.md).
    Q8,
    /// Any other lctx_kv_type value (the library refuses it).
    Other(i32),
}

impl KvType {
    fn raw(self) -> sys::lctx_kv_type {
        match self {
            KvType::F32 => sys::LCTX_KV_F32,
            KvType::F16 => sys::LCTX_KV_F16,
            KvType::Q8 => sys::LCTX_KV_Q8,
            KvType::Other(v) => v as sys::lctx_kv_type,
        }
    }
    fn from_raw(v: sys::lctx_kv_type) -> KvType {
        match v {
            sys::LCTX_KV_F32 => KvType::F32,
            sys::LCTX_KV_F16 => KvType::F16,
            sys::LCTX_KV_Q8 => KvType::Q8,
            v => KvType::Other(v as i32),
        }
    }
}

/// Arithmetic of a session's attention or weight matrix products
/// (lctx_precision; docs/bf16.md has the speed and the effect).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// Exact f32 (the default).
    F32,
    /// Opt-in, lossy: bf16 products with f32 sums on CPUs with AVX512_BF16.
    Bf16,
    /// matmul_precision only; opt-in, lossy: activations rounded to int8
    /// blocks, integer sums with 4-bit weight codes, on CPUs with AVX2.
    Int8,
    /// Any other lctx_precision value (the library refuses it).
    Other(i32),
}

impl Precision {
    fn raw(self) -> sys::lctx_precision {
        match self {
            Precision::F32 => sys::LCTX_PRECISION_F32,
            Precision::Bf16 => sys::LCTX_PRECISION_BF16,
            Precision::Int8 => sys::LCTX_PRECISION_INT8,
            Precision::Other(v) => v as sys::lctx_precision,
        }
    }
    fn from_raw(v: sys::lctx_precision) -> Precision {
        match v {
            sys::LCTX_PRECISION_F32 => Precision::F32,
            sys::LCTX_PRECISION_BF16 => Precision::Bf16,
            sys::LCTX_PRECISION_INT8 => Precision::Int8,
            v => Precision::Other(v as i32),
        }
    }
}

/// When RefreshKV's layers refresh (lctx_refreshkv_schedule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefreshKvSchedule {
    /// Query-drift check every `refreshkv_stride` steps, per layer (the method; the default).
    Dynamic,
    /// Every layer refreshes every `refreshkv_stride` steps (the paper's ablation).
    Fixed,
    /// Any other lctx_refreshkv_schedule value (the library refuses it).
    Other(i32),
}

impl RefreshKvSchedule {
    fn raw(self) -> sys::lctx_refreshkv_schedule {
        match self {
            RefreshKvSchedule::Dynamic => sys::LCTX_REFRESHKV_DYNAMIC,
            RefreshKvSchedule::Fixed => sys::LCTX_REFRESHKV_FIXED,
            RefreshKvSchedule::Other(v) => v as sys::lctx_refreshkv_schedule,
        }
    }
    fn from_raw(v: sys::lctx_refreshkv_schedule) -> RefreshKvSchedule {
        match v {
            sys::LCTX_REFRESHKV_DYNAMIC => RefreshKvSchedule::Dynamic,
            sys::LCTX_REFRESHKV_FIXED => RefreshKvSchedule::Fixed,
            v => RefreshKvSchedule::Other(v as i32),
        }
    }
}

/// RefreshKV's decoding knobs for [`Session::set_refreshkv`]
/// (lctx_refreshkv_params without `gathered`, which that call does not read):
/// the `refreshkv_*` fields of [`SessionParams`] without the prefix.
/// `default()` is lctx_refreshkv_default_params (0: the library's default);
/// [`SessionParams::refreshkv_params`] gives the ones of a session's params.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RefreshKvParams {
    /// K: partial-cache slots per layer and KV head; 0: round(prompt / 8).
    pub partial: i32,
    /// S: steps between query checks (dynamic) or refreshes (fixed); 0: 10.
    pub stride: i32,
    /// Refresh when the query cosine is <= it; 0: the model's value.
    pub threshold: f32,
    pub schedule: RefreshKvSchedule,
    /// Max-pool width over the scores (odd); 0: 7.
    pub pool_kernel: i32,
    /// > 0: also refresh after this many steps without one; 0: never.
    pub max_partial_run: i32,
}

impl Default for RefreshKvParams {
    fn default() -> Self {
        let mut f = unsafe { std::mem::zeroed::<sys::lctx_refreshkv_params>() };
        unsafe { sys::lctx_refreshkv_default_params(&mut f) };
        RefreshKvParams {
            partial: f.partial,
            stride: f.stride,
            threshold: f.threshold,
            schedule: RefreshKvSchedule::from_raw(f.schedule),
            pool_kernel: f.pool_kernel,
            max_partial_run: f.max_partial_run,
        }
    }
}

impl RefreshKvParams {
    /// Writes the knobs into a struct set by lctx_refreshkv_default_params.
    fn fill(&self, f: &mut sys::lctx_refreshkv_params) {
        f.partial = self.partial;
        f.stride = self.stride;
        f.threshold = self.threshold;
        f.schedule = self.schedule.raw();
        f.pool_kernel = self.pool_kernel;
        f.max_partial_run = self.max_partial_run;
    }
}

/// One backend op of a session (lctx_op_time).
#[derive(Debug, Clone, PartialEq)]
pub struct OpTime {
    /// The Backend method's name: "matmul", "attention", "to_host", ...
    pub op: String,
    pub calls: i64,
    /// Wall time inside the op, summed over its calls.
    pub seconds: f64,
    /// to_host, from_host, copy: bytes moved; alloc: bytes allocated; else 0.
    pub bytes: i64,
}

/// Where a session's time went (lctx_session_op_times): its ops in the
/// header's fixed order, and its lifetime in seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct OpTimes {
    pub ops: Vec<OpTime>,
    pub lifetime_s: f64,
}

/// RefreshKV's decoding statistics since the last recompute
/// (lctx_refreshkv_stats plus the per-layer step counts). A layer step is
/// one layer of one decoded token: `n_full + n_partial == n_steps * n_layer`
/// and `layer_full[l] + layer_partial[l] == n_steps`.
#[derive(Debug, Clone, PartialEq)]
pub struct RefreshKvStats {
    pub n_layer: i32,
    /// K in use (partial-cache slots per layer and KV head).
    pub partial: i64,
    /// Decoded tokens.
    pub n_steps: i64,
    /// Layer steps with full attention (and a refresh), all layers.
    pub n_full: i64,
    /// Layer steps over the partial cache, all layers.
    pub n_partial: i64,
    /// Mean over layers of n_steps / full steps of the layer.
    pub effective_stride: f64,
    /// Seconds in full steps' attention, refresh included.
    pub full_attention_s: f64,
    /// Seconds in partial steps' attention.
    pub partial_attention_s: f64,
    /// Of full_attention_s: rebuilding the partial caches.
    pub refresh_s: f64,
    pub layer_full: Vec<i64>,
    pub layer_partial: Vec<i64>,
}

/// Progress of a long call, in [0, 1]; return true to cancel it.
pub type ProgressFn = Arc<dyn Fn(f32) -> bool + Send + Sync>;

/// Progress with the running call's label (one of [`STAGE_LABELS`]) and done in [0, 1].
pub type StageProgressFn = Arc<dyn Fn(&str, f32) -> bool + Send + Sync>;

/// The labels [`SessionParams::on_progress`] receives, one per long call.
pub const STAGE_LABELS: [&str; 4] = ["feed", "build_index", "select", "recompute"];

/// Session parameters; `default()` gives the library's defaults (see lctx.h
/// for each field; 0 in a reform_* field derives it from the model). The
/// reform_* fields go to lctx_reform_params, kv_*, snapkv_* and infinipot_*
/// to lctx_kv_params, infllm_* to lctx_infllm_params, ilre_* to
/// lctx_ilre_params, reattention_* to lctx_reattention_params (-1: derived
/// from the model), refreshkv_* to lctx_refreshkv_params (0: default).
#[derive(Clone)]
pub struct SessionParams {
    pub method: Method,
    pub n_ctx: i32,
    pub n_threads: i32,
    pub n_batch: i32,
    /// Element type of every KV cache of the session.
    pub kv_type: KvType,
    /// Arithmetic of attention's products.
    pub attn_precision: Precision,
    /// Arithmetic of the weight matrix products.
    pub matmul_precision: Precision,
    pub reform_chunk: i32,
    pub reform_budget: i32,
    pub reform_recompute: i32,
    pub reform_sink: i32,
    pub reform_recent: i32,
    pub reform_obs: i32,
    pub reform_keep_first: i32,
    pub reform_keep_last: i32,
    pub reform_pool_half: i32,
    /// Repeated text competes for the recompute budget once: tokens compared (0: 16; < 0: off; 1 is refused).
    pub reform_repeat_window: i32,
    pub reform_h2o_per_chunk: bool,
    /// JSON head profile (`lctx heads`); None: the built-in one for the model.
    pub reform_heads_path: Option<String>,
    /// Baselines (truncate, streaming, h2o, tova, snapkv, infinipot, infllm): see lctx.h.
    pub kv_budget: i32,
    pub kv_chunk: i32,
    pub kv_sink: i32,
    pub kv_recent: i32,
    pub kv_obs: i32,
    pub snapkv_kernel: i32,
    pub infinipot_nuc_ratio: f32,
    /// Catalyst prompt of InfiniPot; None: the built-in one.
    pub infinipot_catalyst: Option<String>,
    pub infllm_block: i32,
    pub infllm_repr: i32,
    /// ILRe: 0-based layer whose keys are indexed; -1 (default): the model's profile.
    pub ilre_retrieval_layer: i32,
    /// ILRe sizes (0: derived from the model; negative: refused): see lctx.h.
    pub ilre_sink: i32,
    pub ilre_window: i32,
    pub ilre_chunk: i32,
    pub ilre_budget: i32,
    /// ILRe: score with the last N tokens of the question only; 0: all of them.
    pub ilre_query_tokens: i32,
    pub ilre_dca: bool,
    /// ILRe block max-pool sizes, e.g. "2,4,8"; None: the default.
    pub ilre_max_kernels: Option<String>,
    /// ILRe average-pool sizes, e.g. "1-16" or "1,3,5"; None: the default.
    pub ilre_avg_kernels: Option<String>,
    /// JSON profile holding the retrieval layer (`lctx heads --ilre`); None: the built-in one.
    pub ilre_profile_path: Option<String>,
    /// ILRe: position-free scoring, every key as if this many positions before the question;
    /// -1 (default): each key at its own position; -2 (auto): -1 within the trained context,
    /// 1024 past it.
    pub ilre_score_distance: i32,
    /// ILRe: repeated text competes for the budget once: tokens compared (0: 16; < 0: off; 1 is refused).
    pub ilre_repeat_window: i32,
    /// ReAttention G: first tokens always attended; -1 (default): derived from the model.
    pub reattention_n_global: i32,
    /// ReAttention L: last tokens always attended, the step's own included; -1: derived.
    pub reattention_n_local: i32,
    /// ReAttention m: tokens around each winner (even); -1: derived.
    pub reattention_span: i32,
    /// ReAttention k: middle tokens each (query head, query token) votes for (1..64); -1: 4.
    pub reattention_top_k: i32,
    /// ReAttention k': winners of the vote; 0: no middle; -1: derived.
    pub reattention_n_spans: i32,
    /// ReAttention: tokens per prefill step after the first (at most 512 and n_local); -1: derived.
    pub reattention_chunk: i32,
    /// ReAttention decode: a layer's selection is reused for this many tokens; 1 (default).
    pub reattention_reuse_steps: i32,
    /// ReAttention: the released kernel's approximation (one candidate per 128-key tile).
    pub reattention_tile_max: bool,
    /// ReAttention: bytes of the K/V store kept in RAM, then a file; 0: RAM only.
    pub reattention_store_max_ram: u64,
    /// ReAttention: directory of that file; None: $TMPDIR, else /tmp.
    pub reattention_store_dir: Option<String>,
    /// RefreshKV K: partial-cache slots per layer and KV head; 0: round(prompt / 8).
    pub refreshkv_partial: i32,
    /// RefreshKV S: steps between query checks (dynamic) or refreshes (fixed); 0: 10.
    pub refreshkv_stride: i32,
    /// RefreshKV: refresh when the query cosine is <= it; 0: the model's value.
    pub refreshkv_threshold: f32,
    pub refreshkv_schedule: RefreshKvSchedule,
    /// RefreshKV: max-pool width over the scores (odd); 0: 7.
    pub refreshkv_pool_kernel: i32,
    /// RefreshKV: > 0: also refresh after this many steps without one; 0: never.
    pub refreshkv_max_partial_run: i32,
    /// REFORM and ILRe: decode their recomputed cache with RefreshKV.
    pub refreshkv_gathered: bool,
    /// Called on the calling thread during long calls. A panic in it cancels
    /// the call and is resumed after the call returns.
    pub progress: Option<ProgressFn>,
    /// `progress` with the running call's label ("feed", "build_index",
    /// "select", "recompute"); set one of the two.
    pub on_progress: Option<StageProgressFn>,
}

impl Default for SessionParams {
    fn default() -> Self {
        let mut p = unsafe { std::mem::zeroed::<sys::lctx_session_params>() };
        let mut r = unsafe { std::mem::zeroed::<sys::lctx_reform_params>() };
        let mut k = unsafe { std::mem::zeroed::<sys::lctx_kv_params>() };
        let mut i = unsafe { std::mem::zeroed::<sys::lctx_infllm_params>() };
        let mut l = unsafe { std::mem::zeroed::<sys::lctx_ilre_params>() };
        let mut a = unsafe { std::mem::zeroed::<sys::lctx_reattention_params>() };
        let mut f = unsafe { std::mem::zeroed::<sys::lctx_refreshkv_params>() };
        unsafe {
            sys::lctx_session_default_params(&mut p);
            sys::lctx_reform_default_params(&mut r);
            sys::lctx_kv_default_params(&mut k);
            sys::lctx_infllm_default_params(&mut i);
            sys::lctx_ilre_default_params(&mut l);
            sys::lctx_reattention_default_params(&mut a);
            sys::lctx_refreshkv_default_params(&mut f);
        }
        SessionParams {
            method: Method::from_raw(p.method),
            n_ctx: p.n_ctx,
            n_threads: p.n_threads,
            n_batch: p.n_batch,
            kv_type: KvType::from_raw(p.kv_type),
            attn_precision: Precision::from_raw(p.attn_precision),
            matmul_precision: Precision::from_raw(p.matmul_precision),
            reform_chunk: r.chunk,
            reform_budget: r.budget,
            reform_recompute: r.recompute,
            reform_sink: r.sink,
            reform_recent: r.recent,
            reform_obs: r.obs,
            reform_keep_first: r.keep_first,
            reform_keep_last: r.keep_last,
            reform_pool_half: r.pool_half,
            reform_repeat_window: r.repeat_window,
            reform_h2o_per_chunk: r.h2o_per_chunk,
            reform_heads_path: None,
            kv_budget: k.budget,
            kv_chunk: k.chunk,
            kv_sink: k.sink,
            kv_recent: k.recent,
            kv_obs: k.obs,
            snapkv_kernel: k.snapkv_kernel,
            infinipot_nuc_ratio: k.infinipot_nuc_ratio,
            infinipot_catalyst: None,
            infllm_block: i.block,
            infllm_repr: i.repr,
            ilre_retrieval_layer: l.retrieval_layer,
            ilre_sink: l.sink,
            ilre_window: l.window,
            ilre_chunk: l.chunk,
            ilre_budget: l.budget,
            ilre_query_tokens: l.query_tokens,
            ilre_dca: l.dca,
            ilre_max_kernels: None,
            ilre_avg_kernels: None,
            ilre_profile_path: None,
            ilre_score_distance: l.score_distance,
            ilre_repeat_window: l.repeat_window,
            reattention_n_global: a.n_global,
            reattention_n_local: a.n_local,
            reattention_span: a.span,
            reattention_top_k: a.top_k,
            reattention_n_spans: a.n_spans,
            reattention_chunk: a.chunk,
            reattention_reuse_steps: a.reuse_steps,
            reattention_tile_max: a.tile_max,
            reattention_store_max_ram: a.store_max_ram,
            reattention_store_dir: None,
            refreshkv_partial: f.partial,
            refreshkv_stride: f.stride,
            refreshkv_threshold: f.threshold,
            refreshkv_schedule: RefreshKvSchedule::from_raw(f.schedule),
            refreshkv_pool_kernel: f.pool_kernel,
            refreshkv_max_partial_run: f.max_partial_run,
            refreshkv_gathered: f.gathered,
            progress: None,
            on_progress: None,
        }
    }
}

/// The progress closure and a panic caught in it, at a stable address that
/// the C library holds as user_data while the session lives.
struct ProgressBox {
    f: ProgressFn,
    panic: Cell<Option<Box<dyn Any + Send>>>,
}

unsafe extern "C" fn progress_trampoline(done: f32, user_data: *mut c_void) -> c_int {
    let b = &*(user_data as *const ProgressBox);
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (b.f)(done))) {
        Ok(cancel) => cancel as c_int,
        Err(payload) => {
            b.panic.set(Some(payload));
            1 // cancel; the panic is resumed when the call returns
        }
    }
}

/// The C params and what they point to, boxed so the addresses stay valid
/// when this moves; alive for the duration of the call that reads them.
struct RawParams {
    p: sys::lctx_session_params,
    _reform: Box<sys::lctx_reform_params>,
    _kv: Box<sys::lctx_kv_params>,
    _infllm: Box<sys::lctx_infllm_params>,
    _ilre: Box<sys::lctx_ilre_params>,
    _reattention: Box<sys::lctx_reattention_params>,
    _refreshkv: Box<sys::lctx_refreshkv_params>,
    _strings: [Option<CString>; 6],
}

impl SessionParams {
    /// The refreshkv_* fields (all but refreshkv_gathered) as the knobs of
    /// [`Session::set_refreshkv`].
    pub fn refreshkv_params(&self) -> RefreshKvParams {
        RefreshKvParams {
            partial: self.refreshkv_partial,
            stride: self.refreshkv_stride,
            threshold: self.refreshkv_threshold,
            schedule: self.refreshkv_schedule,
            pool_kernel: self.refreshkv_pool_kernel,
            max_partial_run: self.refreshkv_max_partial_run,
        }
    }

    /// The C structs (lctx_session_params pointing at the method structs).
    fn raw(&self, progress: Option<&ProgressBox>) -> Result<RawParams> {
        let mut p = unsafe { std::mem::zeroed::<sys::lctx_session_params>() };
        let mut r = Box::new(unsafe { std::mem::zeroed::<sys::lctx_reform_params>() });
        let mut k = Box::new(unsafe { std::mem::zeroed::<sys::lctx_kv_params>() });
        let mut i = Box::new(unsafe { std::mem::zeroed::<sys::lctx_infllm_params>() });
        let mut l = Box::new(unsafe { std::mem::zeroed::<sys::lctx_ilre_params>() });
        let mut a = Box::new(unsafe { std::mem::zeroed::<sys::lctx_reattention_params>() });
        let mut f = Box::new(unsafe { std::mem::zeroed::<sys::lctx_refreshkv_params>() });
        unsafe {
            sys::lctx_session_default_params(&mut p);
            sys::lctx_reform_default_params(&mut *r);
            sys::lctx_kv_default_params(&mut *k);
            sys::lctx_infllm_default_params(&mut *i);
            sys::lctx_ilre_default_params(&mut *l);
            sys::lctx_reattention_default_params(&mut *a);
            sys::lctx_refreshkv_default_params(&mut *f);
        }
        p.method = self.method.raw();
        p.n_ctx = self.n_ctx;
        p.n_threads = self.n_threads;
        p.n_batch = self.n_batch;
        p.kv_type = self.kv_type.raw();
        p.attn_precision = self.attn_precision.raw();
        p.matmul_precision = self.matmul_precision.raw();
        r.chunk = self.reform_chunk;
        r.budget = self.reform_budget;
        r.recompute = self.reform_recompute;
        r.sink = self.reform_sink;
        r.recent = self.reform_recent;
        r.obs = self.reform_obs;
        r.keep_first = self.reform_keep_first;
        r.keep_last = self.reform_keep_last;
        r.pool_half = self.reform_pool_half;
        r.repeat_window = self.reform_repeat_window;
        r.h2o_per_chunk = self.reform_h2o_per_chunk;
        let heads = self.reform_heads_path.as_deref().map(|s| cstring(s, "reform_heads_path")).transpose()?;
        if let Some(h) = &heads {
            r.heads_path = h.as_ptr();
        }
        k.budget = self.kv_budget;
        k.chunk = self.kv_chunk;
        k.sink = self.kv_sink;
        k.recent = self.kv_recent;
        k.obs = self.kv_obs;
        k.snapkv_kernel = self.snapkv_kernel;
        k.infinipot_nuc_ratio = self.infinipot_nuc_ratio;
        let catalyst = self.infinipot_catalyst.as_deref().map(|s| cstring(s, "infinipot_catalyst")).transpose()?;
        if let Some(c) = &catalyst {
            k.infinipot_catalyst = c.as_ptr();
        }
        i.block = self.infllm_block;
        i.repr = self.infllm_repr;
        l.retrieval_layer = self.ilre_retrieval_layer;
        l.sink = self.ilre_sink;
        l.window = self.ilre_window;
        l.chunk = self.ilre_chunk;
        l.budget = self.ilre_budget;
        l.query_tokens = self.ilre_query_tokens;
        l.dca = self.ilre_dca;
        l.score_distance = self.ilre_score_distance;
        l.repeat_window = self.ilre_repeat_window;
        let text = |v: &Option<String>, what: &str| v.as_deref().map(|s| cstring(s, what)).transpose();
        let max_kernels = text(&self.ilre_max_kernels, "ilre_max_kernels")?;
        let avg_kernels = text(&self.ilre_avg_kernels, "ilre_avg_kernels")?;
        let profile = text(&self.ilre_profile_path, "ilre_profile_path")?;
        let ptr = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        l.max_kernels = ptr(&max_kernels);
        l.avg_kernels = ptr(&avg_kernels);
        l.profile_path = ptr(&profile);
        a.n_global = self.reattention_n_global;
        a.n_local = self.reattention_n_local;
        a.span = self.reattention_span;
        a.top_k = self.reattention_top_k;
        a.n_spans = self.reattention_n_spans;
        a.chunk = self.reattention_chunk;
        a.reuse_steps = self.reattention_reuse_steps;
        a.tile_max = self.reattention_tile_max;
        a.store_max_ram = self.reattention_store_max_ram;
        let store_dir = text(&self.reattention_store_dir, "reattention_store_dir")?;
        a.store_dir = ptr(&store_dir);
        self.refreshkv_params().fill(&mut f);
        f.gathered = self.refreshkv_gathered;
        p.reform = &*r;
        p.kv = &*k;
        p.infllm = &*i;
        p.ilre = &*l;
        p.reattention = &*a;
        p.refreshkv = &*f;
        if let Some(b) = progress {
            p.progress = Some(progress_trampoline);
            p.progress_user_data = b as *const ProgressBox as *mut c_void;
        }
        Ok(RawParams {
            p,
            _reform: r,
            _kv: k,
            _infllm: i,
            _ilre: l,
            _reattention: a,
            _refreshkv: f,
            _strings: [heads, catalyst, max_kernels, avg_kernels, profile, store_dir],
        })
    }
}

/// The session handle as seen by Cancellers: null once the session is freed.
struct CancelSlot(Mutex<usize>);

/// Stops the running call of a session from any thread (lctx_session_cancel);
/// does nothing once the session is dropped.
#[derive(Clone)]
pub struct Canceller(Arc<CancelSlot>);

impl Canceller {
    pub fn cancel(&self) {
        let g = self.0 .0.lock().unwrap_or_else(|e| e.into_inner());
        if *g != 0 {
            // SAFETY: the handle is live while the slot holds it (Drop clears it under the lock).
            unsafe { sys::lctx_session_cancel(*g as *mut sys::lctx_session) }
        }
    }
}

/// A session on a borrowed model: feed, build_index, select, recompute,
/// decode. Not locked (not `Sync`); it may move between threads (`Send`).
pub struct Session<'m> {
    h: NonNull<sys::lctx_session>,
    model: &'m Model,
    progress: Option<Box<ProgressBox>>,
    label: Arc<AtomicUsize>,
    cancel: Arc<CancelSlot>,
    _not_sync: PhantomData<Cell<()>>,
}

// SAFETY: lctx.h: "An lctx_session ... may move between threads." The
// progress closure is Send + Sync and the model Sync.
unsafe impl Send for Session<'_> {}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        let mut g = self.cancel.0.lock().unwrap_or_else(|e| e.into_inner());
        *g = 0;
        unsafe { sys::lctx_session_free(self.h.as_ptr()) }
    }
}

impl<'m> Session<'m> {
    fn create(
        model: &'m Model,
        params: &SessionParams,
        make: impl FnOnce(&sys::lctx_session_params, &mut *mut sys::lctx_session) -> sys::lctx_status,
    ) -> Result<Session<'m>> {
        if params.progress.is_some() && params.on_progress.is_some() {
            return Err(crate::error::invalid("set progress or on_progress, not both"));
        }
        let label = Arc::new(AtomicUsize::new(0));
        let staged = params.on_progress.clone().map(|on| {
            let label = label.clone();
            Arc::new(move |done: f32| on(STAGE_LABELS[label.load(Ordering::Relaxed)], done)) as ProgressFn
        });
        let progress =
            params.progress.clone().or(staged).map(|f| Box::new(ProgressBox { f, panic: Cell::new(None) }));
        let raw = params.raw(progress.as_deref())?;
        let mut out = std::ptr::null_mut();
        let st = make(&raw.p, &mut out);
        if let Some(p) = progress.as_ref().and_then(|b| b.panic.take()) {
            unsafe { sys::lctx_session_free(out) };
            std::panic::resume_unwind(p);
        }
        check(st)?;
        let h = NonNull::new(out)
            .ok_or_else(|| Error { status: Status::Internal, message: "NULL session with LCTX_OK".into() })?;
        let cancel = Arc::new(CancelSlot(Mutex::new(h.as_ptr() as usize)));
        Ok(Session { h, model, progress, label, cancel, _not_sync: PhantomData })
    }

    /// A session reading one document (Model::session is the same).
    pub fn new(model: &'m Model, params: &SessionParams) -> Result<Session<'m>> {
        Session::create(model, params, |p, out| unsafe { sys::lctx_session_create(model.h.as_ptr(), p, out) })
    }

    /// A REFORM session in stage Indexed from a file written by save_index
    /// (the encoding sizes come from the file; selection/decode fields apply).
    pub fn load_index(model: &'m Model, path: impl AsRef<Path>, params: &SessionParams) -> Result<Session<'m>> {
        let path = path.as_ref().to_str().ok_or_else(|| crate::error::invalid("index path is not UTF-8"))?;
        let cpath = cstring(path, "index path")?;
        Session::create(model, params, |p, out| unsafe {
            sys::lctx_session_load_index(model.h.as_ptr(), cpath.as_ptr(), p, out)
        })
    }

    /// Runs a call that may invoke the progress callback; resumes its panic.
    fn call(&mut self, f: impl FnOnce(*mut sys::lctx_session) -> sys::lctx_status) -> Result<()> {
        let st = f(self.h.as_ptr());
        if let Some(p) = self.progress.as_ref().and_then(|b| b.panic.take()) {
            std::panic::resume_unwind(p);
        }
        check(st)
    }

    pub fn model(&self) -> &'m Model {
        self.model
    }
    /// The raw handle, for calls through `lctx::sys` (owned by this Session).
    pub fn as_ptr(&self) -> *mut sys::lctx_session {
        self.h.as_ptr()
    }
    pub fn stage(&self) -> Stage {
        match unsafe { sys::lctx_session_stage(self.h.as_ptr()) } {
            sys::LCTX_STAGE_FEEDING => Stage::Feeding,
            sys::LCTX_STAGE_INDEXED => Stage::Indexed,
            sys::LCTX_STAGE_SELECTED => Stage::Selected,
            sys::LCTX_STAGE_DECODING => Stage::Decoding,
            v => Stage::Other(v as i32),
        }
    }
    /// Document tokens fed so far.
    pub fn n_fed(&self) -> i64 {
        unsafe { sys::lctx_session_n_fed(self.h.as_ptr()) }
    }
    /// Every token's score from the last successful select (REFORM, ILRe):
    /// (raw scores, the scores the selection ranks by, forced_first, forced_last).
    pub fn select_scores(&self) -> Result<(Vec<f32>, Vec<f32>, i64, i64)> {
        let (mut n, mut first, mut last) = (0i64, 0i64, 0i64);
        check(unsafe {
            sys::lctx_session_select_scores(self.h.as_ptr(), std::ptr::null_mut(), std::ptr::null_mut(), 0, &mut n,
                                            &mut first, &mut last)
        })?;
        let (mut raw, mut ranked) = (vec![0f32; n as usize], vec![0f32; n as usize]);
        check(unsafe {
            sys::lctx_session_select_scores(self.h.as_ptr(), raw.as_mut_ptr(), ranked.as_mut_ptr(), n, &mut n,
                                            &mut first, &mut last)
        })?;
        Ok((raw, ranked, first, last))
    }
    /// What the latest step's attention could see (ReAttention): for each
    /// stored token (document, then question and answer so far), the share of
    /// layers whose attention window held it, in [0, 1]; all 0 before the
    /// first step. `Status::Unsupported` for a method whose decode attends to
    /// its whole cache.
    pub fn attended(&self) -> Result<Vec<f32>> {
        let mut n = 0i64;
        check(unsafe { sys::lctx_session_attended(self.h.as_ptr(), std::ptr::null_mut(), 0, &mut n) })?;
        let mut share = vec![0f32; n as usize];
        check(unsafe { sys::lctx_session_attended(self.h.as_ptr(), share.as_mut_ptr(), n, &mut n) })?;
        Ok(share)
    }
    /// Message of the last failed call on this session ("" if none).
    pub fn last_error(&self) -> String {
        c_text(unsafe { sys::lctx_session_last_error(self.h.as_ptr()) })
    }
    /// Asks the running call to stop (from this thread: only useful from a
    /// progress callback; use canceller() from other threads).
    pub fn cancel(&self) {
        unsafe { sys::lctx_session_cancel(self.h.as_ptr()) }
    }
    /// A handle that cancels this session's running call from any thread.
    pub fn canceller(&self) -> Canceller {
        Canceller(self.cancel.clone())
    }

    fn set_label(&self, index: usize) {
        self.label.store(index, Ordering::Relaxed);
    }

    /// Stage 1: appends document tokens.
    pub fn feed(&mut self, tokens: &[Token]) -> Result<()> {
        self.set_label(0);
        self.call(|h| unsafe { sys::lctx_feed_chunk(h, tokens.as_ptr(), tokens.len()) })
    }
    /// Tokenizes text and feeds it, the rule of every binding: BOS (when the
    /// model adds one) before the first chunk only, and special-token text
    /// such as "<|im_start|>" is NOT parsed: a document is data, read as
    /// plain text. To feed control tokens, tokenize with parse_special and
    /// call feed.
    pub fn feed_text(&mut self, text: &str) -> Result<usize> {
        let toks = self.model.tokenize(text, self.n_fed() == 0, false)?;
        self.feed(&toks)?;
        Ok(toks.len())
    }
    /// Stage 2: seals the document.
    pub fn build_index(&mut self) -> Result<()> {
        self.set_label(1);
        self.call(|h| unsafe { sys::lctx_build_index(h) })
    }
    /// Writes the REFORM index of an indexed session.
    pub fn save_index(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref().to_str().ok_or_else(|| crate::error::invalid("index path is not UTF-8"))?;
        let cpath = cstring(path, "index path")?;
        self.call(|h| unsafe { sys::lctx_index_save(h, cpath.as_ptr()) })
    }
    /// Stage 3: chooses the document tokens that matter for a question.
    pub fn select(&mut self, query: &[Token]) -> Result<Selection> {
        let mut out = std::ptr::null_mut();
        self.set_label(2);
        self.call(|h| unsafe { sys::lctx_select(h, query.as_ptr(), query.len(), &mut out) })?;
        NonNull::new(out)
            .map(|h| Selection { h })
            .ok_or_else(|| Error { status: Status::Internal, message: "NULL selection with LCTX_OK".into() })
    }
    /// Stage 4: builds the decode cache from a selection and its query.
    pub fn recompute(&mut self, selection: &Selection) -> Result<()> {
        self.set_label(3);
        self.call(|h| unsafe { sys::lctx_recompute(h, selection.h.as_ptr()) })
    }
    /// Stage 5: samples the next token and appends it.
    pub fn decode(&mut self, sampling: &crate::Sampling) -> Result<Token> {
        let raw = sampling.raw();
        let mut tok: Token = -1;
        self.call(|h| unsafe { sys::lctx_decode(h, &raw, &mut tok) })?;
        Ok(tok)
    }
    /// Stage 5 with the caller's token (teacher forcing): returns the natural
    /// log of its probability under the logits the next decode would sample
    /// from, then appends it as if it had been sampled.
    pub fn decode_token(&mut self, token: Token) -> Result<f32> {
        let mut logprob = 0f32;
        self.call(|h| unsafe { sys::lctx_decode_token(h, token, &mut logprob) })?;
        Ok(logprob)
    }
    /// RefreshKV's decoding statistics since the last recompute (sessions of
    /// Method::RefreshKv, or REFORM/ILRe with refreshkv_gathered); an
    /// Unsupported error for other sessions.
    pub fn refreshkv_stats(&self) -> Result<RefreshKvStats> {
        let n = self.model.n_layer().max(0) as usize;
        let (mut full, mut part) = (vec![0i64; n], vec![0i64; n]);
        let mut st = unsafe { std::mem::zeroed::<sys::lctx_refreshkv_stats>() };
        st.struct_size = std::mem::size_of::<sys::lctx_refreshkv_stats>() as u32;
        check(unsafe {
            sys::lctx_session_refreshkv_stats(self.h.as_ptr(), &mut st, full.as_mut_ptr(), part.as_mut_ptr(), n)
        })?;
        let nl = (st.n_layer.max(0) as usize).min(n);
        full.truncate(nl);
        part.truncate(nl);
        Ok(RefreshKvStats {
            n_layer: st.n_layer,
            partial: st.partial,
            n_steps: st.n_steps,
            n_full: st.n_full,
            n_partial: st.n_partial,
            effective_stride: st.effective_stride,
            full_attention_s: st.full_attention_s,
            partial_attention_s: st.partial_attention_s,
            refresh_s: st.refresh_s,
            layer_full: full,
            layer_partial: part,
        })
    }
    /// How the next questions decode, from the next recompute on (an answer
    /// in progress keeps its decoding; the document is not read again):
    /// `Some(knobs)`: RefreshKV with those knobs; `None`: dense decoding. For
    /// sessions of Method::Full, Method::RefreshKv, Reform and Ilre; an
    /// Unsupported error for others,
    /// InvalidArg for bad knobs (nothing changes on an error).
    pub fn set_refreshkv(&mut self, params: Option<&RefreshKvParams>) -> Result<()> {
        let raw = params.map(|k| {
            let mut f = unsafe { std::mem::zeroed::<sys::lctx_refreshkv_params>() };
            unsafe { sys::lctx_refreshkv_default_params(&mut f) };
            k.fill(&mut f);
            f
        });
        let ptr = raw.as_ref().map_or(std::ptr::null(), |f| f as *const sys::lctx_refreshkv_params);
        check(unsafe { sys::lctx_session_set_refreshkv(self.h.as_ptr(), ptr) })
    }
    /// Where the session's time went, per backend op (docs/profiling.md).
    /// Only for a session created while the environment variable
    /// LCTX_PROFILE_OPS was set; an Unsupported error for others.
    pub fn op_times(&self) -> Result<OpTimes> {
        let (mut n, mut life) = (0usize, 0f64);
        check(unsafe { sys::lctx_session_op_times(self.h.as_ptr(), std::ptr::null_mut(), 0, &mut n, &mut life) })?;
        let mut buf: Vec<sys::lctx_op_time> = vec![unsafe { std::mem::zeroed() }; n];
        if n > 0 {
            check(unsafe { sys::lctx_session_op_times(self.h.as_ptr(), buf.as_mut_ptr(), n, &mut n, &mut life) })?;
            buf.truncate(n);
        }
        let ops = buf
            .iter()
            .map(|o| OpTime {
                // SAFETY: the library's static, NUL-terminated op names.
                op: unsafe { std::ffi::CStr::from_ptr(o.op) }.to_string_lossy().into_owned(),
                calls: o.calls,
                seconds: o.seconds,
                bytes: o.bytes,
            })
            .collect();
        Ok(OpTimes { ops, lifetime_s: life })
    }
    /// The logits the next decode samples from (None before recompute).
    pub fn logits(&self) -> Option<&[f32]> {
        let p = unsafe { sys::lctx_session_logits(self.h.as_ptr()) };
        let n = self.model.n_vocab();
        // SAFETY: n_vocab floats, valid until the next call on this session,
        // which needs &mut self and so ends this borrow.
        (!p.is_null() && n > 0).then(|| unsafe { std::slice::from_raw_parts(p, n as usize) })
    }

    /// Seals the document on the first question, selects and recomputes for
    /// `question` (tokenized with special tokens parsed) and returns the
    /// answer's text pieces. Ask again for more questions.
    pub fn ask_stream(&mut self, question: &str, max_tokens: usize, sampling: &crate::Sampling)
        -> Result<crate::Pieces<'_, 'm>> {
        if self.stage() == Stage::Feeding {
            self.build_index()?;
        }
        let q = self.model.tokenize(question, false, true)?;
        let sel = self.select(&q)?;
        self.recompute(&sel)?;
        Ok(self.generate(max_tokens, sampling))
    }
    /// ask_stream collected into one String.
    pub fn ask(&mut self, question: &str, max_tokens: usize, sampling: &crate::Sampling) -> Result<String> {
        self.ask_stream(question, max_tokens, sampling)?.collect()
    }
}

/// The document tokens chosen for a question (library-owned, freed on drop).
pub struct Selection {
    h: NonNull<sys::lctx_selection>,
}

impl Drop for Selection {
    fn drop(&mut self) {
        unsafe { sys::lctx_selection_free(self.h.as_ptr()) }
    }
}

impl Selection {
    /// Number of selected document tokens.
    pub fn len(&self) -> usize {
        unsafe { sys::lctx_selection_size(self.h.as_ptr()) }.max(0) as usize
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Positions of the selected tokens, ascending.
    pub fn positions(&self) -> Vec<i64> {
        let mut v = vec![0i64; self.len()];
        let n = unsafe { sys::lctx_selection_positions(self.h.as_ptr(), v.as_mut_ptr(), v.len() as i64) };
        v.truncate(n.max(0) as usize);
        v
    }
    /// Scores of the selected tokens, in position order.
    pub fn scores(&self) -> Vec<f32> {
        let mut v = vec![0f32; self.len()];
        let n = unsafe { sys::lctx_selection_scores(self.h.as_ptr(), v.as_mut_ptr(), v.len() as i64) };
        v.truncate(n.max(0) as usize);
        v
    }
}
