//! Model information and the tokenizer on stories260K.
mod common;

use common::{tiny_model, DOC};
use lctx::{ChatMessage, Model, ModelParams, Status};

#[test]
fn model_information() {
    let m = tiny_model();
    assert_eq!(m.architecture(), "llama");
    assert_eq!(m.n_vocab(), 512);
    assert!(m.n_layer() > 0 && m.n_head() > 0 && m.n_head_kv() > 0 && m.head_dim() > 0);
    assert_eq!(m.n_embd(), m.n_head() * m.head_dim());
    assert!(m.n_ctx_train() > 0 && m.n_params() > 0 && m.size_bytes() > 0);
    let _ = m.name();
    assert_eq!(m.meta("general.architecture").as_deref(), Some("llama"));
    assert_eq!(m.meta("no.such.key"), None);
    assert!(m.token_bos().is_some() && m.token_eos().is_some());
    assert!(m.is_eog(m.token_eos().unwrap()));
    assert!(!m.is_eog(m.token_bos().unwrap()));
    // -1 (absent) maps to None; whatever the file says, values are in range.
    for t in [m.token_eot(), m.token_pad()].into_iter().flatten() {
        assert!(t < m.n_vocab());
    }
    assert_eq!(m.chat_template(), "");
}

#[test]
fn load_from_memory_matches_load() {
    let m = tiny_model();
    let bytes = std::fs::read(common::tiny_model_path()).unwrap();
    let no_mmap = ModelParams { n_threads: 1, use_mmap: false, ..Default::default() };
    let m2 = Model::load_from_memory(&bytes, &no_mmap).unwrap();
    drop(bytes); // the library copied it
    assert_eq!(m2.n_params(), m.n_params());
    assert_eq!(m2.tokenize(DOC, true, false).unwrap(), m.tokenize(DOC, true, false).unwrap());
}

#[test]
fn tokenize_pieces_detokenize_round_trip() {
    let m = tiny_model();
    let toks = m.tokenize(DOC, true, false).unwrap();
    assert_eq!(toks[0], m.token_bos().unwrap());
    assert_eq!(m.detokenize(&toks, false).unwrap().trim(), DOC.trim());
    let joined: Vec<u8> = toks[1..].iter().flat_map(|&t| m.token_to_piece(t, false).unwrap()).collect();
    assert_eq!(String::from_utf8(joined).unwrap().trim(), DOC.trim());
    // A long text makes the library grow the detokenize buffer.
    let long = DOC.repeat(40);
    let lt = m.tokenize(&long, false, false).unwrap();
    assert_eq!(m.detokenize(&lt, false).unwrap().trim(), long.trim());
    assert!(m.tokenize("", false, false).unwrap().is_empty());
    let e = m.token_to_piece(m.n_vocab() + 3, false).unwrap_err();
    assert_eq!(e.status, Status::InvalidArg);
    assert!(!e.message.is_empty());
}

#[test]
fn chat_template_absent_is_unsupported() {
    let m = tiny_model();
    let msg = ChatMessage { role: "user".into(), content: "hi".into() };
    assert_eq!(m.chat_apply(&[msg], true).unwrap_err().status, Status::Unsupported);
    assert_eq!(m.prompt_parts(), (String::new(), "\n".to_string()));
}

#[test]
fn model_is_shared_between_threads() {
    let m = tiny_model();
    let answers: Vec<String> = std::thread::scope(|scope| {
        let hs: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    let mut s = m.session(&common::small_params()).unwrap();
                    s.feed_text(DOC).unwrap();
                    s.ask(" Lily saw a", 12, &lctx::Sampling::greedy()).unwrap()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(!answers[0].is_empty());
    assert_eq!(answers[0], answers[1]);
}
