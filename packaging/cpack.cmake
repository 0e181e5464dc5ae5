# Binary packages of the C library: `cpack -G TGZ` / `cpack -G DEB` in a build
# directory give lctx-<version>-Linux.tar.gz / lctx_<version>_<arch>.deb with
# the library, header, pkg-config file, CMake package and the C example.
install(FILES ${PROJECT_SOURCE_DIR}/examples/c/ask.c DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)

set(CPACK_PACKAGE_NAME lctx)
set(CPACK_PACKAGE_VENDOR "lctx")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Long-context inference for small language models (C library)")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR "TGZ;DEB")
set(CPACK_PACKAGE_INSTALL_DIRECTORY lctx)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "lctx developers")
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS OFF)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libc6, libstdc++6, libgcc-s1")
if(LCTX_CLI_DEB_DEPENDS)   # set by tools/CMakeLists.txt when bin/lctx links a shared library of its own
  string(APPEND CPACK_DEBIAN_PACKAGE_DEPENDS ", ${LCTX_CLI_DEB_DEPENDS}")
endif()
set(CPACK_SET_DESTDIR OFF)
# the .deb installs where lctx.pc and the CMake package say it is
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
include(CPack)

if(LCTX_BUILD_TESTS AND NOT LCTX_SANITIZE)  # an ASan library cannot serve plain programs
  add_test(NAME packaging_install
    COMMAND bash ${PROJECT_SOURCE_DIR}/packaging/test_install.sh ${PROJECT_BINARY_DIR})
endif()
