# Sourced by scripts/test.sh and scripts/fuzz.sh: the CMake flags of the
# sanitizer and fuzz builds. -O1 with line tables only (-g1): about half the
# compile time of -O2 -g (measured: 101 s -> 52 s for one test file under
# ASan), line tables are all a sanitizer report needs for its stacks, and
# -O1 is what libFuzzer's documentation builds with. LCTX_UNITY: the core's
# layers compile as a few unity files (ASan: 180 -> 139 s wall, 363 -> 273 s
# CPU for liblctx on 2 cores).
san_build_flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo
                 "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
                 "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
                 -DLCTX_UNITY=ON)
