//! The five stages, generation, callbacks, cancel, logging and the REFORM
//! index on stories260K.
mod common;

use common::{small_params, DOC};
use lctx::{Method, Sampling, Session, SessionParams, Stage, Status};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

#[test]
fn stages_and_greedy_is_argmax() {
    let m = common::tiny_model();
    let mut s = m.session(&small_params()).unwrap();
    assert_eq!(s.stage(), Stage::Feeding);
    let e = s.decode(&Sampling::greedy()).unwrap_err();
    assert_eq!(e.status, Status::State);
    assert_eq!(s.last_error(), e.message);
    assert!(s.logits().is_none());
    let n = s.feed_text(DOC).unwrap();
    assert_eq!(s.n_fed() as usize, n);
    s.build_index().unwrap();
    assert_eq!(s.stage(), Stage::Indexed);
    let q = m.tokenize(" She", false, false).unwrap();
    let sel = s.select(&q).unwrap();
    assert_eq!(s.stage(), Stage::Selected);
    let pos = sel.positions();
    assert!(!sel.is_empty());
    assert_eq!(pos.len(), sel.len());
    assert_eq!(sel.scores().len(), sel.len());
    assert!(pos.windows(2).all(|w| w[0] < w[1]) && pos[0] >= 0 && *pos.last().unwrap() < s.n_fed());
    s.recompute(&sel).unwrap();
    drop(sel); // the session copied what it needs
    let logits = s.logits().unwrap().to_vec();
    assert_eq!(logits.len(), m.n_vocab() as usize);
    assert!(logits.iter().all(|v| v.is_finite()));
    let argmax = (0..logits.len()).fold(0, |b, i| if logits[i] > logits[b] { i } else { b });
    assert_eq!(s.decode(&Sampling::greedy()).unwrap() as usize, argmax);
    assert_eq!(s.stage(), Stage::Decoding);
}

#[test]
fn bad_token_is_an_error_and_the_session_stays_usable() {
    let m = common::tiny_model();
    let mut s = m.session(&small_params()).unwrap();
    let e = s.feed(&[1, 2, m.n_vocab() + 100]).unwrap_err();
    assert_eq!(e.status, Status::InvalidArg);
    s.feed_text(DOC).unwrap();
    // Every registry method is implemented: a value outside the enum is refused.
    let e = m.session(&SessionParams { method: Method::Other(Method::count()), ..small_params() }).err().unwrap();
    assert_eq!(e.status, Status::InvalidArg);
    assert!(e.message.contains("unknown method"), "{}", e.message);
}

fn prepared<'m>(m: &'m lctx::Model) -> Session<'m> {
    let mut s = m.session(&small_params()).unwrap();
    s.feed_text(&DOC.repeat(2)).unwrap();
    s.build_index().unwrap();
    let sel = s.select(&m.tokenize(" She", false, false).unwrap()).unwrap();
    s.recompute(&sel).unwrap();
    s
}

#[test]
fn token_iterator_and_text_pieces_agree() {
    let m = common::tiny_model();
    let ids: Vec<_> = prepared(&m).tokens(24, &Sampling::greedy()).collect::<Result<_, _>>().unwrap();
    let mut b = prepared(&m);
    let text: String = b.generate(24, &Sampling::greedy()).collect::<Result<_, _>>().unwrap();
    assert!(!ids.is_empty() && ids.len() <= 24);
    assert!(ids.iter().all(|&t| !m.is_eog(t)));
    let bytes: Vec<u8> = ids.iter().flat_map(|&t| m.token_to_piece(t, false).unwrap()).collect();
    assert_eq!(text, String::from_utf8_lossy(&bytes));
    // After max_tokens the iterator ends; decoding continues from there.
    assert_eq!(b.tokens(0, &Sampling::greedy()).count(), 0);
}

#[test]
fn ask_many_is_deterministic() {
    let m = common::tiny_model();
    let run = || {
        let mut s = m.session(&small_params()).unwrap();
        s.feed_text(&DOC.repeat(2)).unwrap();
        let a = s.ask(" Lily saw a", 16, &Sampling::greedy()).unwrap();
        let b = s.ask(" The ball was", 16, &Sampling::greedy()).unwrap();
        (a, b)
    };
    let (first, second) = (run(), run());
    assert_eq!(first, second);
    assert!(!first.0.is_empty() && !first.1.is_empty());
}

#[test]
fn seeded_sampling_is_reproducible() {
    let m = common::tiny_model();
    let sample = |seed| {
        let mut s = m.session(&small_params()).unwrap();
        s.feed_text(DOC).unwrap();
        let sp = Sampling { temperature: 1.0, top_k: 40, top_p: 0.95, min_p: 0.01, repeat_penalty: 1.1,
                            repeat_last_n: 32, seed };
        s.ask(" She", 20, &sp).unwrap()
    };
    assert_eq!(sample(7), sample(7));
}

#[test]
fn progress_reports_and_cancels() {
    let m = common::tiny_model();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let rec = seen.clone();
    let p = SessionParams {
        n_batch: 16,
        progress: Some(Arc::new(move |d| {
            rec.lock().unwrap().push(d);
            false
        })),
        ..small_params()
    };
    m.session(&p).unwrap().feed_text(DOC).unwrap();
    let seen = seen.lock().unwrap();
    assert!(!seen.is_empty() && seen.iter().all(|d| (0.0..=1.0).contains(d)));

    let p = SessionParams { n_batch: 16, progress: Some(Arc::new(|_| true)), ..small_params() };
    let mut s = m.session(&p).unwrap();
    assert_eq!(s.feed_text(DOC).unwrap_err().status, Status::Cancelled);
    assert_eq!(s.stage(), Stage::Feeding); // left valid
}

#[test]
fn panic_in_progress_cancels_and_propagates() {
    let m = common::tiny_model();
    let p = SessionParams { n_batch: 16, progress: Some(Arc::new(|_| panic!("from the callback"))), ..small_params() };
    let mut s = m.session(&p).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.feed_text(DOC)));
    let payload = r.unwrap_err();
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"from the callback"));
    assert_eq!(s.stage(), Stage::Feeding);
}

#[test]
fn canceller_works_from_another_thread() {
    let m = common::tiny_model();
    let calls = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let tx = Mutex::new(tx);
    let c2 = calls.clone();
    let p = SessionParams {
        n_batch: 8,
        n_ctx: 2048,
        progress: Some(Arc::new(move |_| {
            if c2.fetch_add(1, Ordering::SeqCst) == 0 {
                let _ = tx.lock().unwrap().send(());
            }
            // Slow enough that the cancel lands before the feed ends.
            std::thread::sleep(std::time::Duration::from_millis(5));
            false
        })),
        ..small_params()
    };
    let mut s = m.session(&p).unwrap();
    let canceller = s.canceller();
    let t = std::thread::spawn(move || {
        rx.recv().unwrap();
        canceller.cancel();
        canceller
    });
    let r = s.feed_text(&DOC.repeat(8));
    let canceller = t.join().unwrap();
    assert_eq!(r.unwrap_err().status, Status::Cancelled);
    assert_eq!(s.stage(), Stage::Feeding);
    s.cancel(); // harmless between calls
    drop(s);
    canceller.cancel(); // after the session is gone: does nothing
}

#[test]
fn logger_receives_messages() {
    let m = common::tiny_model();
    let got = Arc::new(Mutex::new(Vec::new()));
    let g2 = got.clone();
    lctx::set_logger(Some(Box::new(move |l, msg: &str| g2.lock().unwrap().push((l, msg.to_string())))),
                     lctx::LogLevel::Debug);
    // REFORM on a model without a built-in head profile warns (lctx.h).
    let r = m.session(&reform_params()).and_then(|mut s| s.feed_text(DOC).and_then(|_| s.build_index()));
    lctx::set_logger(None, lctx::LogLevel::Error);
    r.unwrap();
    let got = got.lock().unwrap();
    assert!(!got.is_empty(), "no log message");
    assert!(got.iter().any(|(l, _)| *l >= lctx::LogLevel::Warn), "{got:?}");
}

/// REFORM sized for the tiny model: several encoding chunks over the document.
fn reform_params() -> SessionParams {
    SessionParams { method: Method::Reform, reform_chunk: 64, reform_budget: 64, reform_recompute: 128, ..small_params() }
}

#[test]
fn reform_index_save_and_load() {
    let m = common::tiny_model();
    let p = reform_params();
    let mut s = m.session(&p).unwrap();
    s.feed_text(&DOC.repeat(6)).unwrap();
    let e = s.save_index(std::env::temp_dir().join("x.lctx")).unwrap_err();
    assert_eq!(e.status, Status::State); // not indexed yet
    s.build_index().unwrap();
    let path = std::env::temp_dir().join(format!("lctx-rust-{}.index", std::process::id()));
    s.save_index(&path).unwrap();
    let q = m.tokenize(" Lily saw a", false, false).unwrap();
    let sel = s.select(&q).unwrap();
    let mut l = Session::load_index(&m, &path, &p).unwrap();
    assert_eq!(l.stage(), Stage::Indexed);
    assert_eq!(l.n_fed(), s.n_fed());
    let sel2 = l.select(&q).unwrap();
    assert_eq!(sel.positions(), sel2.positions());
    assert_eq!(sel.scores(), sel2.scores());
    let a = { s.recompute(&sel).unwrap(); s.generate(12, &Sampling::greedy()).collect::<Result<String, _>>().unwrap() };
    let b = { l.recompute(&sel2).unwrap(); l.generate(12, &Sampling::greedy()).collect::<Result<String, _>>().unwrap() };
    assert_eq!(a, b);
    // A truncated file is refused with a format error.
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let e = Session::load_index(&m, &path, &p).err().unwrap();
    assert_eq!(e.status, Status::Format, "{e}");
    std::fs::remove_file(&path).unwrap();
    let e = Session::load_index(&m, &path, &p).err().unwrap();
    assert_eq!(e.status, Status::Io, "{e}");
}
