//! The crate surface: every function of lctx.h is wrapped, versions, errors.
mod common;

use lctx::{Error, Model, ModelParams, Status};
use std::fs;

/// Names of the functions declared with LCTX_API in lctx.h (no regex crate:
/// the text between LCTX_API and the next '(' ends with the name).
fn header_functions() -> Vec<String> {
    let hdr = fs::read_to_string(common::repo_root().join("include/lctx.h")).unwrap();
    let mut names = Vec::new();
    for part in hdr.split("LCTX_API").skip(1) {
        let decl = &part[..part.find('(').unwrap_or(0)];
        if let Some(name) = decl.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| !w.is_empty()).last() {
            if name.starts_with("lctx_") {
                names.push(name.to_string());
            }
        }
    }
    names
}

#[test]
fn every_header_function_is_wrapped() {
    let names = header_functions();
    assert!(names.len() > 40, "parsed only {} functions from lctx.h", names.len());
    let mut src = String::new();
    for entry in fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/src")).unwrap() {
        src += &fs::read_to_string(entry.unwrap().path()).unwrap();
    }
    let missing: Vec<_> = names.iter().filter(|n| !src.contains(&format!("sys::{n}("))).collect();
    assert!(missing.is_empty(), "C functions not wrapped by the Rust crate: {missing:?}");
}

#[test]
fn versions_match_the_header() {
    let hdr = fs::read_to_string(common::repo_root().join("include/lctx.h")).unwrap();
    let num = |k: &str| -> i32 {
        let line = hdr.lines().find(|l| l.starts_with(&format!("#define LCTX_VERSION_{k} "))).unwrap();
        line.split_whitespace().last().unwrap().parse().unwrap()
    };
    let (a, b, c) = (num("MAJOR"), num("MINOR"), num("PATCH"));
    assert_eq!(lctx::version(), format!("{a}.{b}.{c}"));
    assert_eq!(lctx::version_number(), a * 10000 + b * 100 + c);
    assert!(!lctx::build_info().is_empty());
}

#[test]
fn statuses_round_trip_and_have_text() {
    for code in -10..=-1 {
        let st = Status::from_raw(code);
        assert!(!matches!(st, Status::Other(_)), "{code} unknown");
        assert_eq!(st.raw(), code);
        assert!(!st.text().is_empty());
    }
    assert_eq!(Status::from_raw(-999), Status::Other(-999));
    assert!(!Status::Other(-999).text().is_empty());
}

#[test]
fn load_errors_carry_status_and_message() {
    let e: Error = Model::load("/nonexistent/x.gguf", &ModelParams::default()).err().unwrap();
    assert_eq!(e.status, Status::Io);
    assert!(e.message.contains("/nonexistent/x.gguf"), "{e}");
    assert_eq!(lctx::last_error(), e.message);
    assert!(e.to_string().contains(&e.message));
    let e = Model::load_from_memory(b"not gguf at all", &ModelParams::default()).err().unwrap();
    assert_eq!(e.status, Status::Format);
    let e = Model::load("bad\0path", &ModelParams::default()).err().unwrap();
    assert_eq!(e.status, Status::InvalidArg);
}

#[test]
fn thread_safety_markers_follow_the_header() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Model>();
    send::<lctx::Session<'static>>();
    send_sync::<lctx::Canceller>();
    send_sync::<Error>();
}
