// InlineVector<T, N>: a vector whose first N elements live inside the object itself; only a list
// longer than N puts its elements on the heap. It has the part of std::vector's interface the
// library uses (size, [], iteration, push/emplace_back, resize, reserve, clear) and nothing more.
//
// Note [Lists that stay short]
// The autograd engine passes gradients around in lists: the gradients arriving at a node, the ones
// it returns, the edges to its inputs. Almost every op has one output and at most three inputs, yet
// each such std::vector was a heap block made and freed per node per backward: 8 of the seed step's
// 33 allocations (bench/README.md, "the single-thread floor"). With the elements inline, a short
// list costs no allocation, and a long one (a concat of many tensors) still works, on the heap.
// Shape (shape.h) is the same idea with a hard limit, since tensors have at most kMaxDims dims.
#pragma once

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <new>
#include <utility>

namespace mt {

template <typename T, size_t N>
class InlineVector {
  static_assert(N > 0, "an InlineVector holds at least one element inline");

 public:
  using value_type = T;
  using iterator = T*;
  using const_iterator = const T*;

  InlineVector() = default;
  explicit InlineVector(size_t n) { resize(n); }
  InlineVector(std::initializer_list<T> items) { append_copies(items.begin(), items.end(), items.size()); }
  InlineVector(const InlineVector& other) { append_copies(other.begin(), other.end(), other.size()); }
  InlineVector(InlineVector&& other) noexcept { take(std::move(other)); }
  InlineVector& operator=(const InlineVector& other) {
    if (this != &other) {
      clear();
      append_copies(other.begin(), other.end(), other.size());
    }
    return *this;
  }
  InlineVector& operator=(InlineVector&& other) noexcept {
    if (this != &other) {
      clear();
      release_heap();
      take(std::move(other));
    }
    return *this;
  }
  ~InlineVector() {
    clear();
    release_heap();
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T& back() { return data_[size_ - 1]; }
  const T& back() const { return data_[size_ - 1]; }

  void reserve(size_t n) {
    if (n > capacity_) move_to_heap(n);
  }
  template <typename... Args>
  T& emplace_back(Args&&... args) {
    if (size_ == capacity_) {
      T value(std::forward<Args>(args)...);  // first: args may refer to an element that is about to move
      move_to_heap(2 * capacity_);
      return *new (data_ + size_++) T(std::move(value));
    }
    return *new (data_ + size_++) T(std::forward<Args>(args)...);
  }
  void push_back(const T& value) { emplace_back(value); }
  void push_back(T&& value) { emplace_back(std::move(value)); }
  void pop_back() { std::destroy_at(data_ + --size_); }
  // Grows with value-initialised elements (an undefined Tensor, an empty Edge) or drops the tail.
  void resize(size_t n) {
    if (n < size_) {
      std::destroy(begin() + n, end());
    } else {
      reserve(n);
      std::uninitialized_value_construct(end(), data_ + n);
    }
    size_ = n;
  }
  void clear() {
    std::destroy(begin(), end());
    size_ = 0;
  }

 private:
  T* inline_data() { return std::launder(reinterpret_cast<T*>(inline_)); }
  bool on_heap() const { return capacity_ > N; }

  template <typename It>
  void append_copies(It first, It last, size_t n) {
    reserve(size_ + n);
    for (; first != last; ++first) new (data_ + size_++) T(*first);
  }
  // Moves the elements into a heap block of `capacity` (> N) elements.
  void move_to_heap(size_t capacity) {
    T* block = std::allocator<T>().allocate(capacity);
    std::uninitialized_move(begin(), end(), block);
    std::destroy(begin(), end());
    release_heap();
    data_ = block;
    capacity_ = capacity;
  }
  void release_heap() {
    if (on_heap()) std::allocator<T>().deallocate(data_, capacity_);
    data_ = inline_data();
    capacity_ = N;
  }
  // Takes other's elements into this empty, inline vector: its heap block as it is, inline ones
  // moved one by one. Other is left empty.
  void take(InlineVector&& other) noexcept {
    if (other.on_heap()) {
      data_ = other.data_, capacity_ = other.capacity_, size_ = other.size_;
      other.data_ = other.inline_data(), other.capacity_ = N, other.size_ = 0;
    } else {
      std::uninitialized_move(other.begin(), other.end(), data_);
      size_ = other.size_;
      other.clear();
    }
  }

  alignas(T) std::byte inline_[N * sizeof(T)];
  T* data_ = inline_data();
  size_t size_ = 0;
  size_t capacity_ = N;
};

}  // namespace mt
