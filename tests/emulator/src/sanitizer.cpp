/// \file
/// The ASan and TSan fiber APIs, called only when their runtime is linked in: weak references
/// stay null otherwise, so one harness library serves plain, ASan and TSan builds.

#include "internal.hpp"

extern "C" {
void __sanitizer_start_switch_fiber(void**, const void*, std::size_t) __attribute__((weak));
void __sanitizer_finish_switch_fiber(void*, const void**, std::size_t*) __attribute__((weak));
void* __tsan_get_current_fiber() __attribute__((weak));
void* __tsan_create_fiber(unsigned) __attribute__((weak));
void __tsan_destroy_fiber(void*) __attribute__((weak));
void __tsan_switch_to_fiber(void*, unsigned) __attribute__((weak));
void __tsan_acquire(void*) __attribute__((weak));
void __tsan_release(void*) __attribute__((weak));
}

// In the TSan build, the first race fails the test: the tests prove zero false positives, and
// the death test that expects a race needs the process to die of it.
extern "C" const char* __tsan_default_options() { return "halt_on_error=1"; }

namespace attn_emulator::detail::sanitizer {

namespace {
const bool have_tsan = __tsan_switch_to_fiber != nullptr;
const bool have_asan = !have_tsan && __sanitizer_start_switch_fiber != nullptr;
constexpr unsigned no_sync = 1;  // __tsan_switch_to_fiber_no_sync
}  // namespace

bool tsan() { return have_tsan; }
void* tsan_current_fiber() { return have_tsan ? __tsan_get_current_fiber() : nullptr; }
void* tsan_create_fiber() { return have_tsan ? __tsan_create_fiber(0) : nullptr; }
void tsan_destroy_fiber(void* fiber) {
  if (have_tsan && fiber) __tsan_destroy_fiber(fiber);
}
void tsan_switch_to(void* fiber) {
  if (have_tsan) __tsan_switch_to_fiber(fiber, no_sync);
}
void tsan_acquire(void* object) {
  if (have_tsan) __tsan_acquire(object);
}
void tsan_release(void* object) {
  if (have_tsan) __tsan_release(object);
}
void asan_start_switch(void** fake_stack, const void* bottom, std::size_t size) {
  if (have_asan) __sanitizer_start_switch_fiber(fake_stack, bottom, size);
}
void asan_finish_switch(void* fake_stack, const void** bottom_old, std::size_t* size_old) {
  if (have_asan) __sanitizer_finish_switch_fiber(fake_stack, bottom_old, size_old);
}

}  // namespace attn_emulator::detail::sanitizer
