# Script mode (cmake -P), run at every build: writes OUT, a header defining
# LCTX_REVISION as the source tree's commit (`git rev-parse --short=10 HEAD`,
# with "-modified" when tracked files under the code directories differ from
# it; results and docs do not count), or "unknown" outside a git checkout.
# OUT is rewritten only when that changes, so a build recompiles the files
# that include it after a commit or an edit, and nothing otherwise.
#   cmake -DSRC=<source dir> -DOUT=<header> -P lctx_revision.cmake
execute_process(COMMAND git -C "${SRC}" rev-parse --short=10 HEAD
                OUTPUT_VARIABLE rev RESULT_VARIABLE rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0 OR rev STREQUAL "")
  set(rev "unknown")
else()
  execute_process(COMMAND git -C "${SRC}" status --porcelain --untracked-files=no --
                          src kernels include tools bindings cmake CMakeLists.txt
                  OUTPUT_VARIABLE changed ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT changed STREQUAL "")
    string(APPEND rev "-modified")
  endif()
endif()
set(text "// Generated at build time by cmake/lctx_revision.cmake: do not edit.\n#pragma once\n#define LCTX_REVISION \"${rev}\"\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
