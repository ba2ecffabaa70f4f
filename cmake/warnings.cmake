# attn_warnings(<target>): the warning set of every target built in this tree.
# GCC 12's AVX-512 intrinsic headers trip -W(maybe-)uninitialized inside the intrinsics
# themselves (GCC bug 105593, fixed in GCC 13), so those two are off for GCC < 13 only.
function(attn_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Werror)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(${target} PRIVATE -Wno-maybe-uninitialized -Wno-uninitialized)
  endif()
endfunction()
