//! The crate's Method enum against the library's registry (lctx_method_*,
//! through the C API): the same methods with the same values and names.
//! Fails when a method is added to one and not the other. Also: the
//! method structs' fields (ILRe's) and kv_type/backend reach the library.
mod common;

use lctx::{KvType, Method, Model, ModelParams, Sampling, SessionParams, Stage, Status};

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
    assert!(Method::Reform.is_implemented() && Method::Ilre.is_implemented() && !Method::ReAttention.is_implemented());
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
        ..Default::default()
    };
    assert_eq!(SessionParams::default().ilre_retrieval_layer, -1, "lctx_ilre_default_params: the model's profile");
    let doc = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. ".repeat(4);
    let mut s = m.session(&params()).unwrap();
    let n = s.feed_text(&doc).unwrap() as i64;
    assert!(n > 4 + 40, "document of {n} tokens");
    s.build_index().unwrap();
    let sel = s.select(&m.tokenize(" Lily saw a", false, true).unwrap()).unwrap();
    let pos = sel.positions();
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
    ];
    for (p, field) in bad {
        let e = m.session(&p).err().unwrap_or_else(|| panic!("{field}: accepted"));
        assert_eq!(e.status, Status::InvalidArg, "{field}: {}", e.message);
        assert!(e.message.contains(field), "{field}: {}", e.message);
    }
}

/// kv_type reaches lctx_session_params.kv_type and backend lctx_model_params.backend.
#[test]
fn kv_type_and_backend() {
    let m = common::tiny_model();
    assert_eq!(SessionParams::default().kv_type, KvType::F32);
    for kv_type in [KvType::F32, KvType::F16] {
        let mut s = m.session(&SessionParams { n_ctx: 128, n_threads: 1, kv_type, ..Default::default() }).unwrap();
        s.feed_text("Once upon a time").unwrap();
    }
    let e = m.session(&SessionParams { kv_type: KvType::Other(7), ..Default::default() }).err().unwrap();
    assert_eq!(e.status, Status::InvalidArg);
    assert!(e.message.contains("kv_type"), "{}", e.message);

    let path = common::tiny_model_path();
    let cpu_params = ModelParams { n_threads: 1, backend: Some("cpu".into()), ..Default::default() };
    let cpu = Model::load(&path, &cpu_params).unwrap();
    let mut s = cpu.session(&SessionParams { n_ctx: 128, n_threads: 1, ..Default::default() }).unwrap();
    s.feed_text("Once upon a time").unwrap();
    let e = Model::load(&path, &ModelParams { backend: Some("c\0pu".into()), ..Default::default() }).err().unwrap();
    assert_eq!(e.status, Status::InvalidArg);
    assert!(e.message.contains("backend"), "{}", e.message);
}
