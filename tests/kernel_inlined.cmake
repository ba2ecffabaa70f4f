# Fails when the object compiled from kernel_at_o2.cpp defines any function of the SIMD kernel
# namespaces other than the entry points flash_item, flash_backward_item and flash_decode_item
# and the leaves kept out of line on purpose, the decode kernel's decode_scores,
# decode_quad_scores, decode_row_scores and decode_pv_rows and the backward's whole_block_grads:
# their register tiles live and die inside them, and inlined into flash_decode_item (or
# flash_backward_item) they spilled (see kernel_at_o2.cpp).
# Usage: cmake -DNM=<nm> -DOBJECT=<object file> -P kernel_inlined.cmake
# Mangled names: a function of those namespaces (or a lambda inside one) starts with them; only
# code symbols count (nm types T, t, W, w), not constants such as the block sizes.
execute_process(COMMAND ${NM} --defined-only ${OBJECT} OUTPUT_VARIABLE symbols
                RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${NM} failed on ${OBJECT}")
endif()
string(REPLACE "\n" ";" symbols "${symbols}")
set(kernels 0)
set(outlined)
foreach(symbol IN LISTS symbols)
  if(symbol MATCHES " [TtWw] _ZZ?N4attn10cpu_detail(4avx2|6avx512)")
    if(symbol MATCHES " _ZN4attn10cpu_detail(4avx2|6avx512)(10flash_item|19flash_backward_item|17flash_decode_item)E")
      math(EXPR kernels "${kernels} + 1")
    elseif(NOT symbol MATCHES " _ZN4attn10cpu_detail(4avx2|6avx512)(13decode_scores|18decode_quad_scores|17decode_row_scores|14decode_pv_rows|17whole_block_grads)")
      list(APPEND outlined "${symbol}")
    endif()
  endif()
endforeach()
if(outlined)
  list(JOIN outlined "\n  " outlined)
  message(FATAL_ERROR "kernel helpers compiled out of line at -O2:\n  ${outlined}")
endif()
if(NOT kernels EQUAL 6)
  message(FATAL_ERROR "expected the avx2 and avx512 flash_item, flash_backward_item and flash_decode_item in "
                      "${OBJECT}, found ${kernels}")
endif()
message(STATUS "the six entry points, no helper out of line")
