#pragma once
/// \file
/// attn's version, the same as `project(attn VERSION ...)` in CMakeLists.txt (the CTest case
/// `version.matches_cmake` fails when the two disagree).
///
///     #if ATTN_VERSION >= 100  // 0.1.0 or later
///
/// 0.x releases: every minor version may change the API (find_package(attn 0.1) accepts 0.1.*).

/// Major version: changes for an incompatible API from 1.0 on.
#define ATTN_VERSION_MAJOR 0
/// Minor version: before 1.0, any change of the API.
#define ATTN_VERSION_MINOR 1
/// Patch version: fixes only.
#define ATTN_VERSION_PATCH 0
/// The three as one number, MAJOR * 10000 + MINOR * 100 + PATCH, for `#if` comparisons.
#define ATTN_VERSION (ATTN_VERSION_MAJOR * 10000 + ATTN_VERSION_MINOR * 100 + ATTN_VERSION_PATCH)
/// The three as a string literal, "MAJOR.MINOR.PATCH".
#define ATTN_VERSION_STRING "0.1.0"
