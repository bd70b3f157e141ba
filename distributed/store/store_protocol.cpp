// Encoding and bounds-checked decoding of TCPStore frames (see detail/store_protocol.h).
#include "distributed/store/detail/store_protocol.h"

namespace mt::dist::detail {

uint32_t read_u32_le(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

FrameWriter& FrameWriter::u8(uint8_t v) {
  buf_.push_back(v);
  return *this;
}

FrameWriter& FrameWriter::u32(uint32_t v) {
  for (int i = 0; i < 4; ++i) buf_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return *this;
}

FrameWriter& FrameWriter::i64(int64_t v) {
  const auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) buf_.push_back(static_cast<uint8_t>(u >> (8 * i)));
  return *this;
}

FrameWriter& FrameWriter::str(std::string_view s) {
  MT_CHECK(s.size() <= kMaxFrameBytes, "store message field of ", s.size(), " bytes is too large");
  u32(static_cast<uint32_t>(s.size()));
  buf_.insert(buf_.end(), s.begin(), s.end());
  return *this;
}

FrameWriter& FrameWriter::bytes(const Bytes& b) {
  return str(std::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
}

Bytes FrameWriter::frame() {
  const size_t body = buf_.size() - kFrameHeaderBytes;
  MT_CHECK(body <= kMaxFrameBytes, "store request of ", body, " bytes exceeds the limit of ",
           kMaxFrameBytes, " (too many or too long keys in one call?)");
  for (int i = 0; i < 4; ++i) buf_[i] = static_cast<uint8_t>(body >> (8 * i));
  return std::move(buf_);
}

const uint8_t* FrameReader::take(size_t n) {
  MT_CHECK(static_cast<size_t>(end_ - p_) >= n, "malformed store message: needs ", n, " more bytes, has ",
           end_ - p_);
  const uint8_t* at = p_;
  p_ += n;
  return at;
}

uint8_t FrameReader::u8() { return *take(1); }

uint32_t FrameReader::u32() { return read_u32_le(take(4)); }

int64_t FrameReader::i64() {
  const uint8_t* p = take(8);
  uint64_t u = 0;
  for (int i = 0; i < 8; ++i) u |= uint64_t{p[i]} << (8 * i);
  return static_cast<int64_t>(u);
}

std::string FrameReader::str(size_t max_bytes) {
  const uint32_t n = u32();
  MT_CHECK(n <= max_bytes, "store message field of ", n, " bytes exceeds the limit of ", max_bytes);
  const uint8_t* p = take(n);
  return std::string(reinterpret_cast<const char*>(p), n);
}

Bytes FrameReader::bytes(size_t max_bytes) {
  const uint32_t n = u32();
  MT_CHECK(n <= max_bytes, "store message field of ", n, " bytes exceeds the limit of ", max_bytes);
  const uint8_t* p = take(n);
  return Bytes(p, p + n);
}

}  // namespace mt::dist::detail
