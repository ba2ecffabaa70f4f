#pragma once
/// \file
/// `cuda_staged`: a test-only policy on host views that runs every stage on attn::cuda. Each
/// host view's memory span is copied to the device as it is (same strides, so the kernels see
/// the strided layout the test built), the real attn::cuda stage runs, the device is
/// synchronised and the output's elements (only those) are copied back.

#include <attn/backend/reference/backend.hpp>
#include <attn/cuda.cuh>
#include <cstring>
#include <span>
#include <vector>

namespace attn::test {

/// Host views in, attn::cuda underneath.
struct cuda_staged {
  using space = host_space;
};

/// The device copy of one host view's span, with the view's strides.
template <class T, int R>
class staged_view {
  using U = std::remove_const_t<T>;

 public:
  explicit staged_view(const tensor_view<T, R>& host) : host_(host) {
    const index_t n = cuda_detail::span_elements(host);
    if (n == 0) return;
    ATTN_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), std::size_t(n) * sizeof(U)));
    ATTN_CUDA_CHECK(
        cudaMemcpy(data_, host.data(), std::size_t(n) * sizeof(U), cudaMemcpyHostToDevice));
  }
  staged_view(const staged_view&) = delete;
  staged_view& operator=(const staged_view&) = delete;
  ~staged_view() {
    if (data_ != nullptr) (void)cudaFree(data_);
  }

  tensor_view<T, R, device_space> device() const {
    return {data_, host_.extents(), host_.strides()};
  }

  /// Waits for the device and copies the view's elements back into the host view.
  void write_back() const {
    ATTN_CUDA_CHECK(cudaDeviceSynchronize());
    if (data_ == nullptr) return;
    std::vector<U> span(static_cast<std::size_t>(cuda_detail::span_elements(host_)));
    ATTN_CUDA_CHECK(
        cudaMemcpy(span.data(), data_, span.size() * sizeof(U), cudaMemcpyDeviceToHost));
    cuda_detail::for_offsets(host_, [&](index_t off) { host_.data()[off] = span[off]; });
  }

 private:
  tensor_view<T, R> host_;
  U* data_ = nullptr;
};

/// A bias span on the device (empty stays empty).
template <class T>
class staged_span {
 public:
  explicit staged_span(std::span<const T> host) : n_(host.size()) {
    if (n_ == 0) return;
    ATTN_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), n_ * sizeof(T)));
    ATTN_CUDA_CHECK(cudaMemcpy(data_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  staged_span(const staged_span&) = delete;
  staged_span& operator=(const staged_span&) = delete;
  ~staged_span() {
    if (data_ != nullptr) (void)cudaFree(data_);
  }
  std::span<const T> device() const { return {data_, n_}; }

 private:
  std::size_t n_;
  T* data_ = nullptr;
};

template <class T, int R>
staged_view(const tensor_view<T, R>&) -> staged_view<T, R>;

}  // namespace attn::test

namespace attn {

template <>
struct backend<test::cuda_staged> {
  using cuda_b = backend<cuda_policy>;

  template <class T>
  static void project(const test::cuda_staged&, input_view<T, 3> x, input_view<T, 2> w,
                      std::span<const T> bias, tensor_view<T, 3> y) {
    const test::staged_view dx(x);
    const test::staged_view dy(y);
    const test::staged_view dw(w);
    const test::staged_span<T> db(bias);
    cuda_b::project<T>(cuda, dx.device(), dw.device(), db.device(), dy.device());
    dy.write_back();
  }

  template <class T>
  static void project_qkv(const test::cuda_staged&, input_view<T, 3> x, input_view<T, 2> w_q,
                          input_view<T, 2> w_k, input_view<T, 2> w_v, std::span<const T> b_q,
                          std::span<const T> b_k, std::span<const T> b_v, tensor_view<T, 3> q,
                          tensor_view<T, 3> k, tensor_view<T, 3> v) {
    const test::staged_view dx(x);
    const test::staged_view dq(q);
    const test::staged_view dk(k);
    const test::staged_view dv(v);
    const test::staged_view dwq(w_q);
    const test::staged_view dwk(w_k);
    const test::staged_view dwv(w_v);
    const test::staged_span<T> dbq(b_q), dbk(b_k), dbv(b_v);
    cuda_b::project_qkv<T>(cuda, dx.device(), dwq.device(), dwk.device(), dwv.device(),
                           dbq.device(), dbk.device(), dbv.device(), dq.device(), dk.device(),
                           dv.device());
    dq.write_back();
    dk.write_back();
    dv.write_back();
  }

  template <class T>
  static void scaled_scores(const test::cuda_staged&, input_view<T, 4> q, input_view<T, 4> k,
                            tensor_view<T, 4> s, double scale) {
    const test::staged_view dq(q);
    const test::staged_view dk(k);
    const test::staged_view ds(s);
    cuda_b::scaled_scores<T>(cuda, dq.device(), dk.device(), ds.device(), scale);
    ds.write_back();
  }

  template <class T>
  static void causal_mask(const test::cuda_staged&, tensor_view<T, 4> s) {
    const test::staged_view ds(s);
    cuda_b::causal_mask<T>(cuda, ds.device());
    ds.write_back();
  }

  template <class T>
  static void softmax_rows(const test::cuda_staged&, tensor_view<T, 4> s) {
    const test::staged_view ds(s);
    cuda_b::softmax_rows<T>(cuda, ds.device());
    ds.write_back();
  }

  template <class T>
  static void weighted_values(const test::cuda_staged&, input_view<T, 4> p, input_view<T, 4> v,
                              tensor_view<T, 4> o) {
    const test::staged_view dp(p);
    const test::staged_view dv(v);
    const test::staged_view d_o(o);
    cuda_b::weighted_values<T>(cuda, dp.device(), dv.device(), d_o.device());
    d_o.write_back();
  }

  template <class T>
  static void attention(const test::cuda_staged&, input_view<T, 4> q, input_view<T, 4> k,
                        input_view<T, 4> v, tensor_view<T, 4> o, tensor_view<accum_t<T>, 3> lse,
                        bool causal, double scale) {
    const test::staged_view dq(q);
    const test::staged_view dk(k);
    const test::staged_view dv(v);
    const test::staged_view d_o(o);
    const test::staged_view dl(lse);
    cuda_b::attention<T>(cuda, dq.device(), dk.device(), dv.device(), d_o.device(), dl.device(),
                         causal, scale);
    d_o.write_back();
    dl.write_back();
  }
};

}  // namespace attn
