//! Shared by the integration tests: paths and the tiny model.
#![allow(dead_code)]
use std::path::PathBuf;

pub const DOC: &str = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. \
                       One day, she saw a big red ball under a tree. ";

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

/// stories260K ($LCTX_TINY_MODEL or ../shared/models), or None (the test
/// then returns early with a note, like a skip).
pub fn tiny_model() -> Option<lctx::Model> {
    let path = std::env::var("LCTX_TINY_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo_root().join("../shared/models/stories260K.gguf"));
    if !path.exists() {
        eprintln!("SKIP: tiny model not found at {} (set LCTX_TINY_MODEL)", path.display());
        return None;
    }
    Some(lctx::Model::load(&path, &lctx::ModelParams { n_threads: 1, ..Default::default() }).expect("loading stories260K"))
}

pub fn small_params() -> lctx::SessionParams {
    lctx::SessionParams { n_ctx: 512, n_threads: 1, ..Default::default() }
}

/// The tiny model, or return from the test (skipped) when it is absent.
#[macro_export]
macro_rules! model_or_skip {
    () => {
        match common::tiny_model() {
            Some(m) => m,
            None => return,
        }
    };
}
