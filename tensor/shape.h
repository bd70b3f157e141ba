// Shape: a small inline vector of int64 for sizes and strides. Tensors have at most kMaxDims
// dimensions, so shapes never touch the heap: creating a tensor costs one allocation for its
// handle and one for its bytes, which is what keeps tiny ops cheap (see bench/).
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

#include "tensor/check.h"

namespace mt {

constexpr int kMaxDims = 8;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
  explicit Shape(const std::vector<int64_t>& dims) { assign(dims.begin(), dims.end()); }
  template <typename It>
  Shape(It first, It last) { assign(first, last); }

  int size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t operator[](int i) const { return d_[i]; }
  int64_t& operator[](int i) { return d_[i]; }
  const int64_t* begin() const { return d_; }
  const int64_t* end() const { return d_ + n_; }
  int64_t* begin() { return d_; }
  int64_t* end() { return d_ + n_; }
  int64_t back() const { return d_[n_ - 1]; }

  void push_back(int64_t v) {
    MT_CHECK(n_ < kMaxDims, "tensors have at most ", kMaxDims, " dimensions");
    d_[n_++] = v;
  }
  void insert(int pos, int64_t v) {
    push_back(0);
    std::copy_backward(d_ + pos, d_ + n_ - 1, d_ + n_);
    d_[pos] = v;
  }
  void erase(int pos) {
    std::copy(d_ + pos + 1, d_ + n_, d_ + pos);
    --n_;
  }
  void resize(int n, int64_t fill = 0) {
    MT_CHECK(n <= kMaxDims, "tensors have at most ", kMaxDims, " dimensions, asked for ", n);
    for (int i = n_; i < n; ++i) d_[i] = fill;
    n_ = n;
  }

  // Product of the sizes: the number of elements (1 for a 0-dim shape).
  int64_t numel() const {
    int64_t p = 1;
    for (int i = 0; i < n_; ++i) p *= d_[i];
    return p;
  }
  std::vector<int64_t> vec() const { return {begin(), end()}; }
  std::string str() const;

  bool operator==(const Shape& o) const { return n_ == o.n_ && std::equal(begin(), end(), o.begin()); }

 private:
  template <typename It>
  void assign(It first, It last) {
    n_ = 0;
    for (; first != last; ++first) push_back(static_cast<int64_t>(*first));
  }
  int64_t d_[kMaxDims] = {};
  int n_ = 0;
};

inline std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.str(); }

// Row-major strides of a contiguous tensor of this shape.
Shape contiguous_strides(const Shape& sizes);

// NumPy broadcasting: align trailing dims; each pair must be equal or one of them 1.
// Throws naming `op` and both shapes when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// The strides that show a tensor of these sizes and strides with shape `to`, which the sizes
// broadcast to (the caller checked): 0 along the new leading dims and the dims of size 1 that grow.
Shape broadcast_strides(const Shape& sizes, const Shape& strides, const Shape& to);

// Turns a possibly negative dim into [0, ndim); throws naming `op` when out of range. Inline for the
// common in-range, non-negative dim: ops call it several times each (Tensor::size among them).
int wrap_dim_checked(int64_t dim, int ndim, const char* op);
inline int wrap_dim(int64_t dim, int ndim, const char* op) {
  return dim >= 0 && dim < ndim ? static_cast<int>(dim) : wrap_dim_checked(dim, ndim, op);
}

}  // namespace mt
