# Tests of the Go and Rust bindings against this build's liblctx (they are
# built by their own tools: go test, cargo test --offline).
set(lctx_link_env "CGO_LDFLAGS=-L${PROJECT_BINARY_DIR} -Wl,-rpath,${PROJECT_BINARY_DIR}"
  "LCTX_LIB_DIR=${PROJECT_BINARY_DIR}" "LD_LIBRARY_PATH=${PROJECT_BINARY_DIR}"
  "LCTX_SOURCE_DIR=${PROJECT_SOURCE_DIR}" "GOPROXY=off" "GOFLAGS=-mod=mod" "CARGO_NET_OFFLINE=true")
if(LCTX_BINDINGS_GO AND LCTX_BUILD_TESTS)
  find_program(GO_EXECUTABLE go REQUIRED)
  add_test(NAME go_binding COMMAND ${GO_EXECUTABLE} test -count=1 ./...
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/bindings/go)
  set_tests_properties(go_binding PROPERTIES ENVIRONMENT "${lctx_link_env}")
endif()
if(LCTX_BINDINGS_RUST AND LCTX_BUILD_TESTS AND EXISTS ${PROJECT_SOURCE_DIR}/bindings/rust/Cargo.toml)
  find_program(CARGO_EXECUTABLE cargo REQUIRED)
  # lctx-sys's build.rs generates the FFI from lctx.h with the bindgen CLI.
  find_program(BINDGEN_EXECUTABLE bindgen REQUIRED)
  # Both crates' tests (lctx-sys: FFI and bindgen layout tests; lctx: the safe
  # API on stories260K, incl. the check that every lctx.h function is wrapped).
  add_test(NAME rust_binding COMMAND ${CARGO_EXECUTABLE} test --offline --quiet --workspace
    --target-dir ${PROJECT_BINARY_DIR}/bindings/rust-target
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/bindings/rust)
  set_tests_properties(rust_binding PROPERTIES ENVIRONMENT "${lctx_link_env};LCTX_BINDGEN=${BINDGEN_EXECUTABLE}")
endif()
