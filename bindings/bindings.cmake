# Language bindings (bindings/), each off by default. Included from the top
# level CMakeLists.txt. scripts/test-bindings.sh turns them all on.
option(LCTX_BINDINGS_PYTHON "Build the Python binding (SWIG; needs swig and Python headers)" OFF)
option(LCTX_BINDINGS_JAVA "Build the Java binding (SWIG + JNI; needs swig and a JDK)" OFF)
option(LCTX_BINDINGS_GO "Test the Go binding (cgo; needs go)" OFF)
option(LCTX_BINDINGS_RUST "Test the Rust crates (needs cargo, bindgen)" OFF)

if(LCTX_BINDINGS_PYTHON)
  add_subdirectory(${PROJECT_SOURCE_DIR}/bindings/python ${PROJECT_BINARY_DIR}/bindings/python)
endif()
if(LCTX_BINDINGS_JAVA)
  add_subdirectory(${PROJECT_SOURCE_DIR}/bindings/java ${PROJECT_BINARY_DIR}/bindings/java)
endif()
if(LCTX_BINDINGS_GO OR LCTX_BINDINGS_RUST)
  include(${PROJECT_SOURCE_DIR}/bindings/native_tests.cmake)
endif()
