//! Shared by the integration tests: paths and the tiny model.
#![allow(dead_code)]
use std::path::PathBuf;

pub const DOC: &str = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. \
                       One day, she saw a big red ball under a tree. ";

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

/// Path of stories260K: $LCTX_TINY_MODEL, or the copy committed under tests/data/.
pub fn tiny_model_path() -> PathBuf {
    std::env::var("LCTX_TINY_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo_root().join("tests/data/stories260K.gguf"))
}

/// stories260K, loaded. A missing file fails the test (it is never skipped).
pub fn tiny_model() -> lctx::Model {
    let path = tiny_model_path();
    assert!(
        path.is_file(),
        "test model missing: {} (stories260K.gguf is committed under tests/data/)",
        path.display()
    );
    lctx::Model::load(&path, &lctx::ModelParams { n_threads: 1, ..Default::default() }).expect("loading stories260K")
}

pub fn small_params() -> lctx::SessionParams {
    // These tests mean FULL (the library default is REFORM).
    lctx::SessionParams { method: lctx::Method::Full, n_ctx: 512, n_threads: 1, ..Default::default() }
}
