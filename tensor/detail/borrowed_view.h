// BorrowedView: a view of a tensor that lives on the caller's stack and owns nothing, for the raw
// ops that only need another shape of an operand for the length of one backend call (the 3-D
// (1, M, K) batch views Backend::gemm takes and a bias broadcast for a copy in raw_linalg.cpp, a
// reduction's keepdim shape and the broadcast operands of elementwise ops in raw_ops.cpp).
// raw::as_strided makes the same view as a real tensor: a heap TensorImpl and a reference on the
// storage. Not for use outside tensor/.
//
// Note [Borrowed views]: a Tensor handle is a shared_ptr<TensorImpl>. The handle here is made with
// shared_ptr's aliasing constructor from an empty owner: it points at impl_, a member of this object,
// and has no control block, so making, copying and dropping it allocates nothing and touches no
// reference count; impl_.storage is made the same way, pointing at the viewed tensor's Storage
// without holding it. That is sound only while both of these hold:
//   - the viewed tensor outlives the BorrowedView (it is a function argument or local of the caller,
//     and the BorrowedView a temporary or local of the same call);
//   - nothing the view is passed to keeps a handle to it (or a view of it) past the call. The
//     backends' gemm and copy only read sizes, strides and the data pointer, and enqueue work on the
//     storage's device, whose memory the viewed tensor keeps alive as before.
// A borrowed handle reports use_count 0, so it is never its data's sole owner (Tensor::is_sole_owner):
// no op may take its storage over. It carries no autograd metadata, like every raw view.
#pragma once

#include <memory>
#include <optional>

#include "tensor/tensor.h"

namespace mt::detail {

class BorrowedView {
 public:
  BorrowedView(const Tensor& t, const Shape& sizes, const Shape& strides, int64_t offset) {
    impl_.storage = std::shared_ptr<Storage>(std::shared_ptr<Storage>(), t.storage().get());  // not held
    impl_.sizes = sizes;
    impl_.strides = strides;
    impl_.offset = offset;
    impl_.dtype = t.dtype();
  }
  // The handle points into this object: it cannot be copied or moved (a function can still return
  // one by value: C++17's guaranteed copy elision builds it in place).
  BorrowedView(const BorrowedView&) = delete;
  BorrowedView& operator=(const BorrowedView&) = delete;

  operator const Tensor&() const { return handle_; }

 private:
  TensorImpl impl_;
  Tensor handle_{std::shared_ptr<TensorImpl>(std::shared_ptr<TensorImpl>(), &impl_)};  // not held
};

// t seen with shape `to`, which its shape broadcasts to (the caller checked): itself when the
// shapes are equal, else a borrowed view with the strides raw::expand gives (broadcast_strides),
// without a heap TensorImpl. The same two rules as BorrowedView hold, and this object must
// stay where it was made (it may point at its own member).
class BroadcastOperand {
 public:
  BroadcastOperand(const Tensor& t, const Shape& to) : tensor_(&t) {
    if (t.sizes() == to) return;
    const Shape strides = broadcast_strides(t.sizes(), t.strides(), to);
    tensor_ = &static_cast<const Tensor&>(view_.emplace(t, to, strides, t.storage_offset()));
  }
  BroadcastOperand(const BroadcastOperand&) = delete;
  BroadcastOperand& operator=(const BroadcastOperand&) = delete;

  operator const Tensor&() const { return *tensor_; }

 private:
  std::optional<BorrowedView> view_;
  const Tensor* tensor_;
};

}  // namespace mt::detail
