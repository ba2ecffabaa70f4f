# Runs `andrea_forward 128 <svg>` and checks that it wrote a whole SVG: the mask's 64 rows and
# one cell per visible (query, key) pair of the first 64 positions.
#   cmake -DPROGRAM=<andrea_forward> -DSVG=<file> -P heatmap_test.cmake
cmake_policy(VERSION 3.25)
file(REMOVE ${SVG})
execute_process(COMMAND ${PROGRAM} 128 ${SVG} RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "andrea_forward 128 ${SVG} failed")
endif()
if(NOT EXISTS ${SVG})
  message(FATAL_ERROR "andrea_forward wrote no ${SVG}")
endif()
file(READ ${SVG} svg)
string(REGEX MATCHALL "<rect " rects "${svg}")
list(LENGTH rects count)
# 1 background + 64 mask rows + 64 * 65 / 2 cells + 2 frames + 60 colour-bar steps
if(NOT svg MATCHES "^<svg " OR NOT svg MATCHES "</svg>\n$" OR NOT count EQUAL 2207)
  message(FATAL_ERROR "${SVG} is not the whole picture (${count} rects)")
endif()
message(STATUS "${SVG}: ${count} rects")
