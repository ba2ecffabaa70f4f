# Installs attn into a scratch prefix, then builds and runs tests/consumer/main.cpp with the
# compiler and the flags of `pkg-config --cflags --libs attn` alone (no CMake):
#   cmake -DATTN_BINARY_DIR=... -DWORK_DIR=... -DCXX=<g++> -P pkg_config.cmake
cmake_policy(VERSION 3.25)
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
execute_process(COMMAND ${CMAKE_COMMAND} --install ${ATTN_BINARY_DIR} --prefix ${prefix}
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "installing attn into ${prefix} failed")
endif()

find_program(PKG_CONFIG NAMES pkg-config pkgconf)
if(NOT PKG_CONFIG)
  message(FATAL_ERROR "pkg-config not found (Debian: apt-get install pkgconf)")
endif()
set(ENV{PKG_CONFIG_PATH} ${prefix}/share/pkgconfig)
execute_process(COMMAND ${PKG_CONFIG} --cflags --libs attn RESULT_VARIABLE rc
                OUTPUT_VARIABLE flags OUTPUT_STRIP_TRAILING_WHITESPACE)
if(rc)
  message(FATAL_ERROR "pkg-config --cflags --libs attn failed")
endif()
message(STATUS "pkg-config --cflags --libs attn: ${flags}")
if(NOT flags MATCHES "-I${prefix}/")
  message(FATAL_ERROR "attn's include directory is not in the scratch prefix ${prefix}")
endif()

# -O0: what is under test are pkg-config's flags, and it compiles in half the time of -O2.
separate_arguments(flags UNIX_COMMAND "${flags}")
get_filename_component(here ${CMAKE_SCRIPT_MODE_FILE} DIRECTORY)
foreach(step IN ITEMS build run)
  if(step STREQUAL "build")
    set(cmd ${CXX} -std=c++20 -O0 ${here}/main.cpp -o ${WORK_DIR}/consumer ${flags})
  else()
    set(cmd ${WORK_DIR}/consumer)
  endif()
  execute_process(COMMAND ${cmd} RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "pkg-config consumer: ${step} failed")
  endif()
endforeach()
