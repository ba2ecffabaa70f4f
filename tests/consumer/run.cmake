# Configures, builds and runs tests/consumer against attn in one of three modes:
#   cmake -DMODE=<add_subdirectory|find_package|fetch_content> -DATTN_SOURCE_DIR=...
#         -DATTN_BINARY_DIR=... -DWORK_DIR=... -DGENERATOR=... -P run.cmake
# fetch_content reports "not a git checkout: skipping" (CTest: skipped) outside a git checkout.
file(REMOVE_RECURSE ${WORK_DIR})
set(extra)
if(MODE STREQUAL "find_package")
  execute_process(COMMAND ${CMAKE_COMMAND} --install ${ATTN_BINARY_DIR} --prefix ${WORK_DIR}/prefix
                  RESULT_VARIABLE rc OUTPUT_QUIET)
  if(rc)
    message(FATAL_ERROR "installing attn failed")
  endif()
  list(APPEND extra -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
elseif(MODE STREQUAL "fetch_content")
  execute_process(COMMAND git -C ${ATTN_SOURCE_DIR} rev-parse HEAD RESULT_VARIABLE rc
                  OUTPUT_VARIABLE head OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(rc)
    message(FATAL_ERROR "not a git checkout: skipping")
  endif()
  list(APPEND extra -DATTN_GIT_TAG=${head} -DFETCHCONTENT_QUIET=ON)
endif()

# No build type, so no optimisation: what is under test is how the project is consumed, and -O0
# compiles in half the time (scripts/test builds this consumer with clang -O2 as well).
get_filename_component(here ${CMAKE_SCRIPT_MODE_FILE} DIRECTORY)
foreach(step IN ITEMS configure build run)
  if(step STREQUAL "configure")
    set(cmd ${CMAKE_COMMAND} -S ${here} -B ${WORK_DIR}/build -G ${GENERATOR}
            -DCMAKE_BUILD_TYPE= -DATTN_MODE=${MODE} -DATTN_SOURCE_DIR=${ATTN_SOURCE_DIR}
            ${extra})
  elseif(step STREQUAL "build")
    set(cmd ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
  else()
    set(cmd ${WORK_DIR}/build/consumer)
  endif()
  execute_process(COMMAND ${cmd} RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "consumer ${step} failed (${MODE})")
  endif()
endforeach()
