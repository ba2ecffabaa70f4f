# Makes attn's .deb with `cpack -G DEB`, checks its control fields, unpacks it with `dpkg -x`
# into a scratch folder and builds and runs tests/consumer (find_package) against that folder
# alone:
#   cmake -DCPACK=... -DATTN_BINARY_DIR=... -DWORK_DIR=... -DGENERATOR=... -P deb.cmake
cmake_policy(VERSION 3.25)
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CPACK} -G DEB --config ${ATTN_BINARY_DIR}/CPackConfig.cmake
                        -B ${WORK_DIR}/package
                RESULT_VARIABLE rc OUTPUT_QUIET)
file(GLOB debs ${WORK_DIR}/package/*.deb)
list(LENGTH debs count)
if(rc OR NOT count EQUAL 1)
  message(FATAL_ERROR "cpack -G DEB failed or made ${count} packages")
endif()
message(STATUS "made ${debs}")

function(expect_field field pattern)
  execute_process(COMMAND dpkg-deb --field ${debs} ${field} OUTPUT_VARIABLE value
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT value MATCHES "${pattern}")
    message(FATAL_ERROR "the .deb's ${field} is '${value}', expected '${pattern}'")
  endif()
endfunction()
expect_field(Architecture "^all$")
expect_field(Depends "^libeigen3-dev( |$)")

set(root ${WORK_DIR}/root)
execute_process(COMMAND dpkg -x ${debs} ${root} RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "dpkg -x failed")
endif()
foreach(file IN ITEMS include/attn/attn.hpp include/attn/version.hpp share/cmake/attn/attnConfig.cmake
                      share/pkgconfig/attn.pc share/doc/attn/README.md share/doc/attn/LICENSE
                      share/doc/attn/docs/benchmarks.md)
  if(NOT EXISTS ${root}/usr/${file})
    message(FATAL_ERROR "the .deb has no /usr/${file}")
  endif()
endforeach()

# Only the unpacked folder: no package registry, and attn_DIR checked after configuring. No build
# type, so no optimisation: what is under test is the package, and -O0 compiles in half the time.
get_filename_component(here ${CMAKE_SCRIPT_MODE_FILE} DIRECTORY)
set(build_dir ${WORK_DIR}/build)
foreach(step IN ITEMS configure build run)
  if(step STREQUAL "configure")
    set(cmd ${CMAKE_COMMAND} -S ${here} -B ${build_dir} -G ${GENERATOR} -DCMAKE_BUILD_TYPE=
            -DATTN_MODE=find_package -DCMAKE_PREFIX_PATH=${root}/usr
            -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
  elseif(step STREQUAL "build")
    set(cmd ${CMAKE_COMMAND} --build ${build_dir})
  else()
    set(cmd ${build_dir}/consumer)
  endif()
  execute_process(COMMAND ${cmd} RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR ".deb consumer: ${step} failed")
  endif()
  if(step STREQUAL "configure")
    file(STRINGS ${build_dir}/CMakeCache.txt attn_dir REGEX "^attn_DIR:")
    if(NOT attn_dir STREQUAL "attn_DIR:PATH=${root}/usr/share/cmake/attn")
      message(FATAL_ERROR "the consumer found attn elsewhere: ${attn_dir}")
    endif()
  endif()
endforeach()
