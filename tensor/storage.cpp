// Storage's release and take_bytes (Note [Storage that lets go of its bytes], tensor/storage.h).
#include "tensor/storage.h"

#include "tensor/check.h"

namespace mt {

void Storage::release() {
  MT_CHECK(allocator_ != nullptr, "Storage::release: the bytes of a small CPU tensor live inside its storage "
           "(Note [Small bytes inline]) and cannot be released; make the storage with its allocator");
  if (data_ == nullptr) return;
  allocator_->deallocate(data_, nbytes_);
  data_ = nullptr;
}

void Storage::take_bytes(Storage& from) {
  MT_CHECK(released(), "Storage::take_bytes: this storage still holds its bytes; release() it first");
  MT_CHECK(from.nbytes_ == nbytes_ && from.device_ == device_, "Storage::take_bytes: ", from.nbytes_, " bytes on ",
           from.device_, " cannot stand for ", nbytes_, " bytes on ", device_);
  MT_CHECK(from.allocator_ != nullptr && from.data_ != nullptr, "Storage::take_bytes: the source holds no bytes of "
           "its allocator's (released, or a small tensor's inline bytes)");
  data_ = from.data_;
  allocator_ = from.allocator_;
  from.data_ = nullptr;
}

}  // namespace mt
