# Installs attn, then configures, builds (nvcc, sm_80 and sm_90) and runs tests/cuda/consumer:
#   cmake -DATTN_BINARY_DIR=... -DWORK_DIR=... -DGENERATOR=... -P run.cmake
# Without a GPU the consumer exits 77 and this script reports "no usable GPU: skipping".
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${ATTN_BINARY_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "installing attn failed")
endif()
get_filename_component(here ${CMAKE_SCRIPT_MODE_FILE} DIRECTORY)
execute_process(COMMAND ${CMAKE_COMMAND} -S ${here} -B ${WORK_DIR}/build -G ${GENERATOR}
                        -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
                        -DCMAKE_CUDA_COMPILER=${CUDA_COMPILER} RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "cuda consumer configure failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "cuda consumer build failed")
endif()
execute_process(COMMAND ${WORK_DIR}/build/cuda_consumer RESULT_VARIABLE rc)
if(rc EQUAL 77)
  message(STATUS "cuda consumer: no usable GPU: skipping the run")
elseif(rc)
  message(FATAL_ERROR "cuda consumer run failed")
endif()
