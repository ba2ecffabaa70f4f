# Packages around the CMake one (CMakeLists.txt installs the headers and the CMake config):
#   - attn.pc for pkg-config, in share/pkgconfig (header-only, so architecture-independent);
#   - README, LICENSE, the README's pictures (docs/images) and the benchmark log it links
#     (docs/benchmarks.md) in share/doc/attn;
#   - CPack: `cpack -G DEB` in a build tree makes libattn-dev_<version>_all.deb of all of that,
#     installed under /usr and depending on libeigen3-dev.
# Included from CMakeLists.txt after its install rules.

if(ATTN_INSTALL)
  # attn.pc finds its prefix from its own place (${pcfiledir}), so the file stays right for
  # `cmake --install --prefix <anywhere>`, for DESTDIR and for the .deb.
  set(ATTN_PC_DIR ${CMAKE_INSTALL_DATADIR}/pkgconfig)
  file(RELATIVE_PATH ATTN_PC_PREFIX_FROM_PCFILEDIR /prefix/${ATTN_PC_DIR} /prefix)
  string(REGEX REPLACE "/$" "" ATTN_PC_PREFIX_FROM_PCFILEDIR "${ATTN_PC_PREFIX_FROM_PCFILEDIR}")
  configure_file(cmake/attn.pc.in ${PROJECT_BINARY_DIR}/attn.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/attn.pc DESTINATION ${ATTN_PC_DIR})
  # docs/images beside the README, so that its pictures show where it is read. (Not
  # CMAKE_INSTALL_DOCDIR: in a parent project that names the parent's folder.)
  set(ATTN_DOC_DIR ${CMAKE_INSTALL_DATAROOTDIR}/doc/attn)
  install(FILES README.md LICENSE DESTINATION ${ATTN_DOC_DIR})
  install(DIRECTORY docs/images DESTINATION ${ATTN_DOC_DIR}/docs)
  install(FILES docs/benchmarks.md DESTINATION ${ATTN_DOC_DIR}/docs)  # (the README links it)
endif()

# Debian package (a Debian name for a headers-only library: lib<name>-dev). Only for the
# top-level project: CPack's configuration is one per build tree, a parent project's own.
if(NOT PROJECT_IS_TOP_LEVEL)
  return()
endif()
set(CPACK_PACKAGE_NAME libattn-dev)
set(CPACK_PACKAGE_VENDOR attn)
if(NOT DEFINED CPACK_PACKAGE_CONTACT)  # the Maintainer field; -DCPACK_PACKAGE_CONTACT=... sets it
  set(CPACK_PACKAGE_CONTACT "The attn authors")
endif()
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_RESOURCE_FILE_README ${PROJECT_SOURCE_DIR}/README.md)
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE all)
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libeigen3-dev (>= 3.4)")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "nvidia-cuda-toolkit")  # for find_package(attn COMPONENTS cuda)
# (the Description field's first line is CPACK_PACKAGE_DESCRIPTION_SUMMARY)
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "Every stage of a transformer's attention layer (projection, scores, mask, softmax,
weighted values), the fused flash attention and the multi-head layer, forward and backward,
on a reference, an Eigen CPU and a CUDA backend. CMake: find_package(attn); pkg-config: attn.")
include(CPack)
