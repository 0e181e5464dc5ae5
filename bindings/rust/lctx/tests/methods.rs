//! The crate's Method enum against the library's registry (lctx_method_*,
//! through the C API): the same methods with the same values and names.
//! Fails when a method is added to one and not the other. Also: the
//! method structs' fields (ILRe's, ReAttention's, RefreshKV's) and
//! kv_type/backend reach the library.
mod common;

use lctx::{
    KvType, Method, Model, ModelParams, Precision, RefreshKvParams, RefreshKvSchedule, Sampling, SessionParams, Stage,
    Status,
};

#[test]
fn method_enum_matches_the_registry() {
    let n = Method::count();
    assert!(n >= 12);
    assert_eq!(Method::ALL.len() as i32, n, "the crate lists {:?}, the registry {n} methods", Method::ALL);
    for (i, m) in Method::ALL.iter().enumerate() {
        assert_eq!(m.value(), i as i32, "{m:?}");
        assert_eq!(Method::from_value(i as i32), *m);
        let name = m.name().unwrap_or_else(|| panic!("registry has no method {i}"));
        // The variant's identifier, lower-cased, is the registry name.
        assert_eq!(format!("{m:?}").to_lowercase(), name, "method {i}");
        assert_eq!(Method::from_name(&name).unwrap(), *m);
        assert_eq!(Method::from_name(&name.to_uppercase()).unwrap(), *m);
        assert!(!m.description().unwrap_or_default().is_empty(), "{m:?}");
    }
    assert_eq!(Method::from_value(n), Method::Other(n));
    assert_eq!(Method::Other(n).name(), None);
    assert!(!Method::Other(n).is_implemented());
    // Every method of the registry is implemented; a value outside the enum is not.
    for m in Method::ALL {
        assert!(m.is_implemented(), "{m:?}");
    }
    assert!(!Method::Other(-1).is_implemented());
    let e = Method::from_name("reformer").unwrap_err();
    assert_eq!(e.status, Status::InvalidArg);
    assert!(e.message.contains("reformer"), "{}", e.message);
}

/// ILRe with explicit knobs (the ilre_* fields reach lctx_ilre_params): the
/// five stages run, the selection is the sinks + the budget (the document is
/// longer), and bad values are refused as invalid arguments naming the field.
#[test]
fn ilre_session_with_explicit_params() {
    let m = common::tiny_model();
    let params = || SessionParams {
        method: Method::Ilre,
        n_ctx: 256,
        n_threads: 1,
        ilre_retrieval_layer: 1,
        ilre_sink: 4,
        ilre_window: 32,
        ilre_chunk: 64,
        ilre_budget: 40,
        ilre_query_tokens: 0,
        ilre_dca: true,
        ilre_max_kernels: Some("2,4".into()),
        ilre_avg_kernels: Some("1-8".into()),
        // The document repeats itself: the repeat filter is off so that ILRe
        // ranks by its raw scores (the filter zeroes the later copies).
        ilre_repeat_window: -1,
        ..Default::default()
    };
    assert_eq!(SessionParams::default().ilre_retrieval_layer, -1, "lctx_ilre_default_params: the model's profile");
    assert_eq!(SessionParams::default().ilre_score_distance, -1, "lctx_ilre_default_params: keys at their positions");
    let doc = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. ".repeat(4);
    let mut s = m.session(&params()).unwrap();
    let n = s.feed_text(&doc).unwrap() as i64;
    assert!(n > 4 + 40, "document of {n} tokens");
    s.build_index().unwrap();
    assert_eq!(s.select_scores().unwrap_err().status, Status::State, "select_scores before a select");
    let sel = s.select(&m.tokenize(" Lily saw a", false, true).unwrap()).unwrap();
    let pos = sel.positions();
    // select_scores: one score per document token; ILRe ranks by its raw scores,
    // the sinks are forced, the selection's scores are those at its positions.
    let (raw, ranked, first, last) = s.select_scores().unwrap();
    assert_eq!((raw.len() as i64, first, last), (n, 4, 0));
    assert_eq!(raw, ranked);
    let at: Vec<f32> = pos.iter().map(|&p| raw[p as usize]).collect();
    assert_eq!(sel.scores(), at);
    assert_eq!((sel.len(), pos.len()), (4 + 40, 4 + 40));
    assert_eq!(pos[..4], [0, 1, 2, 3], "the sinks are always gathered");
    assert!(pos.windows(2).all(|w| w[0] < w[1]) && pos[pos.len() - 1] < n, "{pos:?}");
    s.recompute(&sel).unwrap();
    for _ in 0..4 {
        let t = s.decode(&Sampling::greedy()).unwrap();
        assert!((0..m.n_vocab()).contains(&t), "token {t}");
    }
    assert_eq!(s.stage(), Stage::Decoding);
    drop(sel);
    drop(s);

    let bad = [
        (SessionParams { ilre_max_kernels: Some("2,x".into()), ..params() }, "max_kernels"),
        (SessionParams { ilre_avg_kernels: Some("8-1".into()), ..params() }, "avg_kernels"),
        (SessionParams { ilre_chunk: -1, ..params() }, "chunk"),
        (SessionParams { ilre_retrieval_layer: m.n_layer(), ..params() }, "retrieval_layer"),
        (SessionParams { ilre_max_kernels: Some("2\0".into()), ..params() }, "ilre_max_kernels"),
        (SessionParams { ilre_score_distance: -3, ..params() }, "score_distance"),
        (SessionParams { ilre_repeat_window: 1, ..params() }, "repeat_window"),
    ];
    for (p, field) in bad {
        let e = m.session(&p).err().unwrap_or_else(|| panic!("{field}: accepted"));
        assert_eq!(e.status, Status::InvalidArg, "{field}: {}", e.message);
        assert!(e.message.contains(field), "{field}: {}", e.message);
    }
}

/// attended (lctx_session_attended): one share per stored token, in [0, 1];
/// the global and local tokens were in every layer's window, the middle only
/// where a layer's spans fell (3 spans of 8: at most 24 of 264); refused for
/// FULL, whose decode attends to its whole cache.
#[test]
fn attended_shares_of_reattention() {
    let m = common::tiny_model();
    // 300 tokens in [3, n_vocab) from a fixed xorshift (no rand crate).
    let mut x = 11u64;
    let doc: Vec<i32> = (0..300)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            3 + (x % (m.n_vocab() as u64 - 3)) as i32
        })
        .collect();
    let params = SessionParams {
        method: Method::ReAttention,
        n_ctx: 512,
        n_threads: 1,
        reattention_n_global: 4,
        reattention_n_local: 32,
        reattention_span: 8,
        reattention_n_spans: 3,
        reattention_chunk: 16,
        ..Default::default()
    };
    let mut s = m.session(&params).unwrap();
    assert!(s.attended().unwrap().is_empty(), "nothing stored yet");
    s.feed(&doc).unwrap();
    s.build_index().unwrap();
    let share = s.attended().unwrap();
    assert_eq!((share.len(), s.n_fed()), (300, 300));
    assert!(share.iter().all(|v| (0.0..=1.0).contains(v)), "{share:?}");
    assert!(share[..4].iter().all(|&v| v == 1.0), "global: {:?}", &share[..4]);
    assert!(share[300 - 32..].iter().all(|&v| v == 1.0), "local: {:?}", &share[300 - 32..]);
    assert!(share[4..300 - 32].iter().any(|&v| v == 0.0), "every middle token was seen: {:?}", &share[4..300 - 32]);
    drop(s);

    let mut f = m.session(&SessionParams { method: Method::Full, n_ctx: 512, n_threads: 1, ..Default::default() }).unwrap();
    f.feed(&doc).unwrap();
    f.build_index().unwrap();
    let e = f.attended().unwrap_err();
    assert_eq!(e.status, Status::Unsupported, "{}", e.message);
    assert!(e.message.contains("attends to its whole cache"), "{}", e.message);
}

/// reform_repeat_window reaches lctx_reform_params.repeat_window: 1 is refused, -1 (off) and 40 accepted.
#[test]
fn reform_repeat_window() {
    let m = common::tiny_model();
    let p = |w: i32| SessionParams { method: Method::Reform, n_threads: 1, reform_repeat_window: w, ..Default::default() };
    let e = m.session(&p(1)).err().expect("repeat window 1 accepted");
    assert_eq!(e.status, Status::InvalidArg);
    assert!(e.message.contains("repeat window"), "{}", e.message);
    for w in [-1, 0, 40] {
        m.session(&p(w)).unwrap_or_else(|e| panic!("repeat window {w}: {}", e.message));
    }
}

/// kv_type reaches lctx_session_params.kv_type and backend lctx_model_params.backend.
#[test]
fn kv_type_and_backend() {
    let m = common::tiny_model();
    assert_eq!(SessionParams::default().kv_type, KvType::F32);
    for kv_type in [KvType::F32, KvType::F16, KvType::Q8] {
        let mut s = m.session(&SessionParams { method: Method::Full, n_ctx: 128, n_threads: 1, kv_type, ..Default::default() }).unwrap();
        s.feed_text("Once upon a time").unwrap();
    }
    let e = m.session(&SessionParams { kv_type: KvType::Other(7), ..Default::default() }).err().unwrap();
    assert_eq!(e.status, Status::InvalidArg);
    assert!(e.message.contains("kv_type"), "{}", e.message);

    // attn_precision / matmul_precision (docs/bf16.md)
    assert_eq!(SessionParams::default().attn_precision, Precision::F32);
    let bf16 = SessionParams { method: Method::Full, n_ctx: 128, n_threads: 1, attn_precision: Precision::Bf16,
                               matmul_precision: Precision::Bf16, ..Default::default() };
    m.session(&bf16).unwrap().feed_text("Once upon a time").unwrap();
    // int8 (docs/int8.md): matmuls only; attention refuses it by name.
    let int8 = SessionParams { method: Method::Full, n_ctx: 128, n_threads: 1, matmul_precision: Precision::Int8,
                               ..Default::default() };
    m.session(&int8).unwrap().feed_text("Once upon a time").unwrap();
    let e = m.session(&SessionParams { attn_precision: Precision::Int8, ..Default::default() }).err().unwrap();
    assert_eq!(e.status, Status::InvalidArg);
    assert!(e.message.contains("attn_precision"), "{}", e.message);
    let e = m.session(&SessionParams { matmul_precision: Precision::Other(5), ..Default::default() }).err().unwrap();
    assert_eq!(e.status, Status::InvalidArg);
    assert!(e.message.contains("matmul_precision"), "{}", e.message);

    let path = common::tiny_model_path();
    let cpu_params = ModelParams { n_threads: 1, backend: Some("cpu".into()), ..Default::default() };
    let cpu = Model::load(&path, &cpu_params).unwrap();
    let mut s = cpu.session(&SessionParams { method: Method::Full, n_ctx: 128, n_threads: 1, ..Default::default() }).unwrap();
    s.feed_text("Once upon a time").unwrap();
    let e = Model::load(&path, &ModelParams { backend: Some("c\0pu".into()), ..Default::default() }).err().unwrap();
    assert_eq!(e.status, Status::InvalidArg);
    assert!(e.message.contains("backend"), "{}", e.message);
}

/// Every method makes a session; a method value outside the enum is refused
/// as an invalid argument.
#[test]
fn every_method_makes_a_session() {
    let m = common::tiny_model();
    for method in Method::ALL {
        let p = SessionParams {
            method,
            n_threads: 1,
            kv_budget: 64,
            kv_chunk: 32,
            kv_sink: 4,
            kv_recent: 4,
            infllm_block: 16,
            ..Default::default()
        };
        let mut s = m.session(&p).unwrap_or_else(|e| panic!("{method:?}: {}", e.message));
        s.feed_text("Once upon a time there was a little girl.").unwrap();
        s.build_index().unwrap();
    }
    for bad in [Method::count(), Method::count() + 7, -1] {
        let p = SessionParams { method: Method::Other(bad), n_threads: 1, ..Default::default() };
        let e = m.session(&p).err().unwrap_or_else(|| panic!("method {bad} accepted"));
        assert_eq!(e.status, Status::InvalidArg, "{}", e.message);
        assert!(e.message.contains("unknown method"), "{}", e.message);
    }
}

const STORY: &str = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. ";

/// ReAttention with small sizes (the reattention_* fields reach
/// lctx_reattention_params): a document longer than n_global + n_local has a
/// middle that every layer scores, so the answer differs from FULL's; select
/// returns every document position; an odd span and other bad values are
/// refused as invalid arguments naming the field.
#[test]
fn reattention_session_with_explicit_params() {
    let m = common::tiny_model();
    let d = SessionParams::default();
    assert_eq!(
        (d.reattention_n_global, d.reattention_n_local, d.reattention_span, d.reattention_top_k),
        (-1, -1, -1, -1),
        "lctx_reattention_default_params: derived from the model"
    );
    assert_eq!((d.reattention_n_spans, d.reattention_chunk, d.reattention_reuse_steps), (-1, -1, 1));
    assert_eq!((d.reattention_tile_max, d.reattention_store_max_ram, d.reattention_store_dir), (false, 0, None));
    let params = || SessionParams {
        method: Method::ReAttention,
        n_ctx: 512,
        n_threads: 1,
        reattention_n_global: 4,
        reattention_n_local: 64,
        reattention_span: 8,
        reattention_top_k: 2,
        reattention_n_spans: 4,
        reattention_chunk: 16,
        reattention_reuse_steps: 1,
        reattention_tile_max: false,
        reattention_store_max_ram: 0,
        reattention_store_dir: None,
        ..Default::default()
    };
    let doc = STORY.repeat(8);
    let q = m.tokenize(" Lily saw a", false, true).unwrap();
    let mut s = m.session(&params()).unwrap();
    let n = s.feed_text(&doc).unwrap() as i64;
    assert!(n > 4 + 64 + 4 * 8, "document of {n} tokens");
    s.build_index().unwrap();
    let sel = s.select(&q).unwrap();
    assert_eq!(sel.positions(), (0..n).collect::<Vec<i64>>(), "select returns every document position");
    s.recompute(&sel).unwrap();
    drop(sel);
    let logits = s.logits().unwrap().to_vec();
    for _ in 0..6 {
        let t = s.decode(&Sampling::greedy()).unwrap();
        assert!((0..m.n_vocab()).contains(&t), "token {t}");
    }
    assert_eq!(s.stage(), Stage::Decoding);
    drop(s);

    let mut f = m.session(&SessionParams { method: Method::Full, n_ctx: 512, n_threads: 1, ..Default::default() }).unwrap();
    f.feed_text(&doc).unwrap();
    f.build_index().unwrap();
    let sel = f.select(&q).unwrap();
    f.recompute(&sel).unwrap();
    let full = f.logits().unwrap();
    assert_eq!((logits.len(), full.len()), (m.n_vocab() as usize, m.n_vocab() as usize));
    let diff = logits.iter().zip(full).fold(0f32, |d, (a, b)| d.max((a - b).abs()));
    assert!(diff > 1e-4, "ReAttention read the whole document (max logit difference {diff})");

    let bad = [
        (SessionParams { reattention_span: 7, ..params() }, "span"),
        (SessionParams { reattention_top_k: 65, ..params() }, "top_k"),
        (SessionParams { reattention_chunk: 65, ..params() }, "chunk"),
        (SessionParams { reattention_n_local: 0, ..params() }, "n_local"),
        (SessionParams { reattention_store_dir: Some("/t\0mp".into()), ..params() }, "reattention_store_dir"),
    ];
    for (p, field) in bad {
        let e = m.session(&p).err().unwrap_or_else(|| panic!("{field}: accepted"));
        assert_eq!(e.status, Status::InvalidArg, "{field}: {}", e.message);
        assert!(e.message.contains(field), "{field}: {}", e.message);
    }
}

/// RefreshKV with small K and stride (the refreshkv_* fields reach
/// lctx_refreshkv_params): the statistics count every decoded token at every
/// layer (full + partial = steps), decode_token teacher-forces, and bad
/// values are refused as invalid arguments naming the field.
#[test]
fn refreshkv_session_with_explicit_params() {
    let m = common::tiny_model();
    let d = SessionParams::default();
    assert_eq!((d.refreshkv_partial, d.refreshkv_stride, d.refreshkv_threshold), (0, 0, 0.0));
    assert_eq!(d.refreshkv_schedule, RefreshKvSchedule::Dynamic);
    assert_eq!((d.refreshkv_pool_kernel, d.refreshkv_max_partial_run, d.refreshkv_gathered), (0, 0, false));
    let params = || SessionParams {
        method: Method::RefreshKv,
        n_ctx: 512,
        n_threads: 1,
        refreshkv_partial: 16,
        refreshkv_stride: 2,
        refreshkv_threshold: 0.5,
        refreshkv_schedule: RefreshKvSchedule::Dynamic,
        refreshkv_pool_kernel: 3,
        refreshkv_max_partial_run: 3,
        refreshkv_gathered: false,
        ..Default::default()
    };
    let mut s = m.session(&params()).unwrap();
    let n = s.feed_text(&STORY.repeat(4)).unwrap();
    assert!(n > 16, "document of {n} tokens");
    s.build_index().unwrap();
    let sel = s.select(&m.tokenize(" Lily saw a", false, true).unwrap()).unwrap();
    s.recompute(&sel).unwrap();
    drop(sel);
    let toks: Vec<_> = (0..9).map(|_| s.decode(&Sampling::greedy()).unwrap()).collect();
    assert!(toks.iter().all(|t| (0..m.n_vocab()).contains(t)), "{toks:?}");
    let lp = s.decode_token(toks[0]).unwrap();
    assert!(lp <= 0.0, "log-probability {lp}");
    let st = s.refreshkv_stats().unwrap();
    assert_eq!((st.n_layer, st.partial), (m.n_layer(), 16));
    assert_eq!(st.n_steps, 9, "10 tokens decoded, the last one not yet appended");
    assert_eq!(st.n_full + st.n_partial, st.n_steps * st.n_layer as i64);
    assert_eq!((st.layer_full.len(), st.layer_partial.len()), (st.n_layer as usize, st.n_layer as usize));
    for (l, (f, p)) in st.layer_full.iter().zip(&st.layer_partial).enumerate() {
        assert_eq!(f + p, st.n_steps, "layer {l}");
        assert!(*f >= 3, "layer {l}: {f} full steps (max_partial_run 3: at 3, 6, 9 at least)");
    }
    assert_eq!(st.layer_full.iter().sum::<i64>(), st.n_full);
    assert!(st.effective_stride >= 1.0);
    let e = s.decode_token(m.n_vocab() + 5).unwrap_err();
    assert_eq!(e.status, Status::InvalidArg);
    drop(s);

    let f = m.session(&SessionParams { method: Method::Full, n_ctx: 256, n_threads: 1, ..Default::default() }).unwrap();
    assert_eq!(f.refreshkv_stats().unwrap_err().status, Status::Unsupported);
    drop(f);

    let bad = [
        (SessionParams { refreshkv_pool_kernel: 4, ..params() }, "pool_kernel"),
        (SessionParams { refreshkv_stride: -1, ..params() }, "stride"),
        (SessionParams { refreshkv_partial: -2, ..params() }, "partial"),
        (SessionParams { refreshkv_schedule: RefreshKvSchedule::Other(7), ..params() }, "schedule"),
    ];
    for (p, field) in bad {
        let e = m.session(&p).err().unwrap_or_else(|| panic!("{field}: accepted"));
        assert_eq!(e.status, Status::InvalidArg, "{field}: {}", e.message);
        assert!(e.message.contains(field), "{field}: {}", e.message);
    }
}

/// One REFRESHKV session answers a question with RefreshKV, densely after
/// set_refreshkv(None), then with RefreshKV again; each answer (greedy
/// tokens, then the logits after them) equals the one of a fresh session of
/// that way (FULL for dense). K = 8 slots of a ~100-token prompt: the two
/// ways answer differently, so the comparisons mean something. Bad knobs and
/// a method that cannot switch are refused by status.
#[test]
fn set_refreshkv_switches_between_refreshkv_and_dense() {
    let m = common::tiny_model();
    let question = m.tokenize(" Lily saw a", false, true).unwrap();
    let params = |method| SessionParams {
        method,
        n_ctx: 512,
        n_threads: 1,
        refreshkv_partial: 8,
        refreshkv_stride: 3,
        kv_budget: 64,
        ..Default::default()
    };
    let opened = |method| {
        let mut s = m.session(&params(method)).unwrap();
        s.feed_text(&STORY.repeat(4)).unwrap();
        s.build_index().unwrap();
        s
    };
    let answer = |s: &mut lctx::Session| {
        let sel = s.select(&question).unwrap();
        s.recompute(&sel).unwrap();
        drop(sel);
        let toks: Vec<_> = (0..16).map(|_| s.decode(&Sampling::greedy()).unwrap()).collect();
        (toks, s.logits().expect("logits while decoding").to_vec())
    };
    let want_rkv = answer(&mut opened(Method::RefreshKv));
    let want_full = answer(&mut opened(Method::Full));
    assert_ne!(want_rkv.0, want_full.0, "K too large for RefreshKV to differ from dense");
    let same = |got: (Vec<lctx::Token>, Vec<f32>), want: &(Vec<lctx::Token>, Vec<f32>), what: &str| {
        assert_eq!(got.0, want.0, "{what}: tokens");
        assert!(got.1 == want.1, "{what}: the logits after the answer differ");
    };

    let knobs = params(Method::RefreshKv).refreshkv_params();
    assert_eq!((knobs.partial, knobs.stride), (8, 3));
    assert_eq!(RefreshKvParams::default().partial, 0);
    let mut s = opened(Method::RefreshKv);
    same(answer(&mut s), &want_rkv, "RefreshKV first");
    s.set_refreshkv(None).unwrap();
    same(answer(&mut s), &want_full, "dense after set_refreshkv(None)");
    assert_eq!(s.refreshkv_stats().unwrap_err().status, Status::Unsupported, "dense: no RefreshKV statistics");
    s.set_refreshkv(Some(&knobs)).unwrap();
    same(answer(&mut s), &want_rkv, "RefreshKV again");
    assert_eq!(s.refreshkv_stats().unwrap().partial, 8);

    let e = s.set_refreshkv(Some(&RefreshKvParams { stride: -3, ..knobs })).unwrap_err();
    assert_eq!(e.status, Status::InvalidArg, "{}", e.message);
    assert!(e.message.contains("stride"), "{}", e.message);
    same(answer(&mut s), &want_rkv, "RefreshKV after the refused switch");
    drop(s);

    let mut h = opened(Method::H2o);
    let e = h.set_refreshkv(Some(&knobs)).unwrap_err();
    assert_eq!(e.status, Status::Unsupported, "{}", e.message);
    assert!(e.message.contains("h2o"), "{}", e.message);
    assert_eq!(h.set_refreshkv(None).unwrap_err().status, Status::Unsupported);
}

#[test]
fn op_times_of_a_profiled_session() {
    // A session made while LCTX_PROFILE_OPS is set times its backend ops:
    // FULL attends once per layer and forward pass; others answer Unsupported.
    // No other test reads or sets the variable, so changing it here is safe.
    let m = common::tiny_model();
    std::env::set_var("LCTX_PROFILE_OPS", "1");
    let mut s = m
        .session(&SessionParams { method: Method::Full, n_ctx: 512, n_threads: 1, n_batch: 64, ..Default::default() })
        .unwrap();
    std::env::remove_var("LCTX_PROFILE_OPS");
    let toks: Vec<_> = (3..203).collect();
    s.feed(&toks).unwrap();
    let t = s.op_times().unwrap();
    let attention = t.ops.iter().find(|o| o.op == "attention").expect("attention timed");
    // A fed chunk reads no logits, so the last layer computes no row.
    assert_eq!(attention.calls, 4 * (m.n_layer() as i64 - 1), "200 tokens in passes of 64");
    assert!(t.ops.iter().all(|o| o.calls > 0 && o.seconds >= 0.0), "{:?}", t.ops);
    assert!(t.ops.iter().map(|o| o.seconds).sum::<f64>() <= t.lifetime_s);
    drop(s);
    let f = m.session(&SessionParams { method: Method::Full, n_ctx: 256, n_threads: 1, ..Default::default() }).unwrap();
    assert_eq!(f.op_times().unwrap_err().status, Status::Unsupported);
}
