# attn_cuda_flags(<target>): the nvcc options of every CUDA target built in this tree: C++20
# (CMake 3.25 does not know nvcc 13's flag for it), ptxas' register/shared-memory report, and
# register spills or local memory as errors.
function(attn_cuda_flags target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20 -Xptxas=-v,-warn-spills,-warn-lmem-usage --Werror=all-warnings>)
endfunction()
