// Generates the FFI from lctx.h with the bindgen CLI (Debian's `bindgen`
// package, or $LCTX_BINDGEN) and links liblctx. Generating at build time
// keeps the bindings equal to the header by construction (no checked-in copy).
//
// Where liblctx is found, in order:
//   1. $LCTX_LIB_DIR (a build tree or an install's lib dir);
//   2. the repository build tree ../../../build/release, when it holds liblctx.so;
//   3. pkg-config (an installed lctx: `pkg-config --libs lctx`).
// The header comes from $LCTX_INCLUDE_DIR, else the repository's include/, else
// pkg-config's include dirs. At run time the dynamic loader must find
// liblctx.so (LD_LIBRARY_PATH, an rpath, or a system path).
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn pkg_config(args: &[&str]) -> Option<String> {
    let out = Command::new(env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".into()))
        .args(args)
        .arg("lctx")
        .output()
        .ok()?;
    if out.status.success() {
        Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        None
    }
}

fn has_lib(dir: &Path) -> bool {
    dir.join("liblctx.so").exists() || dir.join("liblctx.dylib").exists() || dir.join("liblctx.a").exists()
}

fn main() {
    for var in ["LCTX_LIB_DIR", "LCTX_INCLUDE_DIR", "LCTX_BINDGEN", "PKG_CONFIG_PATH"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=build.rs");
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let repo = manifest.join("../../..");

    // The library.
    let default_dir = repo.join("build/release");
    let mut include_dirs: Vec<PathBuf> = Vec::new();
    if let Ok(dir) = env::var("LCTX_LIB_DIR") {
        let dir = PathBuf::from(dir);
        if !has_lib(&dir) {
            panic!("LCTX_LIB_DIR={} holds no liblctx.so (build the `lctx` CMake target first)", dir.display());
        }
        println!("cargo:rustc-link-search=native={}", dir.display());
        println!("cargo:rustc-link-lib=dylib=lctx");
    } else if has_lib(&default_dir) {
        println!("cargo:rustc-link-search=native={}", default_dir.display());
        println!("cargo:rustc-link-lib=dylib=lctx");
    } else if let Some(libs) = pkg_config(&["--libs"]) {
        for flag in libs.split_whitespace() {
            if let Some(d) = flag.strip_prefix("-L") {
                println!("cargo:rustc-link-search=native={d}");
            } else if let Some(l) = flag.strip_prefix("-l") {
                println!("cargo:rustc-link-lib={l}");
            }
        }
        let cflags = pkg_config(&["--cflags"]).unwrap_or_default();
        include_dirs.extend(cflags.split_whitespace().filter_map(|f| f.strip_prefix("-I")).map(PathBuf::from));
    } else {
        panic!(
            "liblctx not found: set LCTX_LIB_DIR to a directory holding liblctx.so, build {} \
             (cmake -B build/release && cmake --build build/release --target lctx), or install lctx \
             so that `pkg-config --libs lctx` works",
            default_dir.display()
        );
    }

    // The header.
    if let Ok(dir) = env::var("LCTX_INCLUDE_DIR") {
        include_dirs.insert(0, PathBuf::from(dir));
    } else if repo.join("include/lctx.h").exists() {
        include_dirs.insert(0, repo.join("include"));
    }
    let header = include_dirs
        .iter()
        .map(|d| d.join("lctx.h"))
        .find(|h| h.exists())
        .unwrap_or_else(|| panic!("lctx.h not found (set LCTX_INCLUDE_DIR); looked in {include_dirs:?}"));
    println!("cargo:rerun-if-changed={}", header.display());
    println!("cargo:include={}", header.parent().unwrap().display());

    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("lctx_bindings.rs");
    let bindgen = env::var("LCTX_BINDGEN").unwrap_or_else(|_| "bindgen".into());
    let run = |extra: &[&str]| {
        Command::new(&bindgen)
            .arg(&header)
            .args(["--allowlist-function", "lctx_.*", "--allowlist-type", "lctx_.*", "--allowlist-var", "LCTX_.*"])
            .arg("--no-prepend-enum-name")
            .args(extra)
            .arg("-o")
            .arg(&out)
            .output()
    };
    // --size_t-is-usize is needed by bindgen < 0.61 and is the default (and
    // may be refused) in later versions.
    let result = match run(&["--size_t-is-usize"]) {
        Ok(o) if o.status.success() => o,
        Ok(_) => run(&[]).expect("running bindgen"),
        Err(e) => panic!("cannot run `{bindgen}` ({e}): install it (apt-get install bindgen) or set LCTX_BINDGEN"),
    };
    if !result.status.success() {
        panic!("bindgen failed on {}:\n{}", header.display(), String::from_utf8_lossy(&result.stderr));
    }
}
