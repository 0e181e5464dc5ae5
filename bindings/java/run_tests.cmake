# Compiles the JUnit 5 tests against lctx.jar and runs them with the console
# launcher of Debian's junit5 package (cmake -P; arguments as -D).
set(junit_dir /usr/share/java)
set(launcher ${junit_dir}/junit-platform-console-standalone.jar)
if(NOT EXISTS ${launcher})
  message(FATAL_ERROR "JUnit 5 console launcher not found: apt-get install junit5")
endif()
file(REMOVE_RECURSE ${OUT_DIR})
file(GLOB tests ${TEST_DIR}/org/lctx/*.java)
execute_process(COMMAND ${JAVAC} -d ${OUT_DIR} -cp ${launcher}:${JAR_FILE} ${tests} RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "javac (tests) failed")
endif()
set(ENV{LCTX_SOURCE_DIR} ${LCTX_SOURCE_DIR})
# Runs the tests that `selector` picks (a console launcher option) in a JVM
# of its own; what fails is named by `what`.
function(run_junit selector what)
  execute_process(COMMAND ${JAVA} -Xcheck:jni -jar ${launcher} --disable-banner --details=summary
    --fail-if-no-tests -cp ${OUT_DIR}:${JAR_FILE} "${selector}" RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "Java tests failed${what}")
  endif()
endfunction()
run_junit("--select-package=org.lctx" "")
# The per-op times test again, in a process profiled from its start: the JVM
# cannot set its own environment, so the run above checks only the refusal
# of an unprofiled session.
set(ENV{LCTX_PROFILE_OPS} 1)
run_junit("--select-method=org.lctx.BindingTest#opTimes" " (opTimes with LCTX_PROFILE_OPS=1)")
