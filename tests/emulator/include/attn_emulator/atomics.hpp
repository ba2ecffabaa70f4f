#pragma once
/// \file
/// CUDA's atomics on the CPU: relaxed std::atomic_ref operations, so ThreadSanitizer sees them
/// as atomics (no race, no ordering). Only the overloads CUDA has: a float atomicMax is built
/// from atomicCAS, as on the GPU.

#include <atomic>
#include <type_traits>

namespace attn_emulator {

template <class T>
concept atomic_word =
    std::is_same_v<T, int> || std::is_same_v<T, unsigned> || std::is_same_v<T, unsigned long long>;

template <class T>
concept atomic_add_type = atomic_word<T> || std::is_same_v<T, float> || std::is_same_v<T, double>;

template <class T>
concept atomic_minmax_type = atomic_word<T> || std::is_same_v<T, long long>;

template <class T, class F>
T atomic_update(T* address, F f) {
  std::atomic_ref<T> ref(*address);
  T old = ref.load(std::memory_order_relaxed);
  while (!ref.compare_exchange_weak(old, f(old), std::memory_order_relaxed)) {
  }
  return old;
}

}  // namespace attn_emulator

template <attn_emulator::atomic_add_type T>
T atomicAdd(T* address, std::type_identity_t<T> value) {
  return std::atomic_ref<T>(*address).fetch_add(value, std::memory_order_relaxed);
}

template <attn_emulator::atomic_word T>
T atomicSub(T* address, std::type_identity_t<T> value) {
  return std::atomic_ref<T>(*address).fetch_sub(value, std::memory_order_relaxed);
}

template <attn_emulator::atomic_minmax_type T>
T atomicMax(T* address, std::type_identity_t<T> value) {
  return attn_emulator::atomic_update(address, [=](T old) { return old < value ? value : old; });
}

template <attn_emulator::atomic_minmax_type T>
T atomicMin(T* address, std::type_identity_t<T> value) {
  return attn_emulator::atomic_update(address, [=](T old) { return value < old ? value : old; });
}

template <class T>
requires attn_emulator::atomic_word<T> || std::is_same_v<T, float> T
atomicExch(T* address, std::type_identity_t<T> value) {
  return std::atomic_ref<T>(*address).exchange(value, std::memory_order_relaxed);
}

template <attn_emulator::atomic_word T>
T atomicCAS(T* address, std::type_identity_t<T> compare, std::type_identity_t<T> value) {
  std::atomic_ref<T>(*address).compare_exchange_strong(compare, value, std::memory_order_relaxed);
  return compare;
}
