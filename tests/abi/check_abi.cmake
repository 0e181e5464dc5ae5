# ABI guard: the exported lctx_* symbols of liblctx.so (C++ template
# instantiations that leak with default visibility, W/V/u, are not API and
# vary with the compiler, so they are left out) and the layout of the
# public structs must equal the recorded symbols.txt and layout.txt.
# A deliberate change (a new function, a field appended to a params struct)
# is recorded with:  cmake --build <build> --target lctx_abi_update
# Arguments (-D): LIB, LAYOUT (the layout program), DIR (this directory), UPDATE.
execute_process(COMMAND nm -D --defined-only ${LIB} OUTPUT_VARIABLE nm_out RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "nm failed on ${LIB}")
endif()
string(REGEX MATCHALL "[0-9a-fA-F]+ [A-Za-z] [^\n]+" lines "${nm_out}")
set(symbols)
foreach(l IN LISTS lines)
  string(REGEX REPLACE "^[0-9a-fA-F]+ ([A-Za-z]) (.+)$" "\\1 \\2" s "${l}")
  if(s MATCHES "^[A-Za-z] lctx_")
    list(APPEND symbols "${s}")
  endif()
endforeach()
list(SORT symbols)
list(JOIN symbols "\n" symbols)
set(symbols "${symbols}\n")
execute_process(COMMAND ${LAYOUT} OUTPUT_VARIABLE layout RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "layout program failed")
endif()

if(UPDATE)
  file(WRITE ${DIR}/symbols.txt "${symbols}")
  file(WRITE ${DIR}/layout.txt "${layout}")
  message(STATUS "ABI snapshot updated in ${DIR}: review and commit symbols.txt and layout.txt")
  return()
endif()

set(failed FALSE)
foreach(kind symbols layout)
  file(READ ${DIR}/${kind}.txt expected)
  if(NOT "${${kind}}" STREQUAL "${expected}")
    file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/abi_${kind}.actual "${${kind}}")
    execute_process(COMMAND diff -u ${DIR}/${kind}.txt ${CMAKE_CURRENT_BINARY_DIR}/abi_${kind}.actual)
    set(failed TRUE)
  endif()
endforeach()
if(failed)
  message(FATAL_ERROR "The ABI of liblctx changed (diff above: - recorded, + now). Only every symbol "
    "recorded may stay, only appended struct fields are compatible (a new field must start at or after the "
    "old sizeof, not in its tail padding: a caller's struct_size covers that padding), and any change must be "
    "deliberate: "
    "record it with `cmake --build <build> --target lctx_abi_update` (and bump LCTX_ABI_VERSION when "
    "something was removed or moved).")
endif()
message(STATUS "ABI unchanged")
