// The TCPStore wire format, shared by the server (tcp_store_server.cpp) and the client (tcp_store.cpp).
//
// Every message is a frame: a 4-byte little-endian body length, then the body. Bodies are built from
// u8, u32, i64 (little-endian) and strings (u32 length + bytes). The client speaks first, and only one
// request is in flight per connection: request, reply, request, reply.
//
//   client -> server                               server -> client
//   Hello  magic version token                     Ok | Error message (then the server hangs up)
//   Set    key value                               Ok
//   Get    timeout_ms key                          Ok value | Timeout
//   Add    key delta                               Ok new_value
//   Check  n key...                                Ok u8(all set)
//   Wait   timeout_ms n key...                     Ok | Timeout n missing_key...
//   (any request the server cannot honour)         Error message
//
// Note [Server-side timeouts]: a Get or Wait carries its timeout and the *server* answers "Timeout"
// when it expires. Had the client simply stopped listening, a late answer would arrive as the reply to
// its next request; this way every request gets exactly one reply and the stream never goes out of
// step. The client still bounds its own wait (timeout plus a grace period) in case the server is gone.
//
// Note [Bounded frames]: the server reads a frame's length before its body and refuses (replies Error,
// hangs up) any frame above kMaxFrameBytes, or above kMaxHelloBytes before the client has shown the job
// token, so a stranger cannot make it allocate more than a few kilobytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "distributed/store/store.h"

namespace mt::dist::detail {

inline constexpr uint32_t kStoreMagic = 0x564b544d;  // "MTKV" on the wire
inline constexpr uint32_t kStoreProtocolVersion = 1;
inline constexpr size_t kMaxTokenBytes = 1024;
inline constexpr size_t kMaxHelloBytes = kMaxTokenBytes + 64;
inline constexpr size_t kMaxFrameBytes = kMaxValueBytes + kMaxKeyBytes + 64;
inline constexpr size_t kFrameHeaderBytes = 4;

enum class Op : uint8_t { Hello = 1, Set = 2, Get = 3, Add = 4, Check = 5, Wait = 6 };
enum class Status : uint8_t { Ok = 0, Timeout = 1, Error = 2 };

// Builds one frame; the length header is filled in by frame().
class FrameWriter {
 public:
  FrameWriter() : buf_(kFrameHeaderBytes, 0) {}
  FrameWriter& u8(uint8_t v);
  FrameWriter& u32(uint32_t v);
  FrameWriter& i64(int64_t v);
  FrameWriter& str(std::string_view s);
  FrameWriter& bytes(const Bytes& b);
  // The finished frame. Fails when the body exceeds kMaxFrameBytes (the server would refuse it).
  Bytes frame();

 private:
  Bytes buf_;
};

// Reads a frame body, checking every length against the bytes present (the bytes may be hostile).
class FrameReader {
 public:
  FrameReader(const uint8_t* data, size_t n) : p_(data), end_(data + n) {}
  uint8_t u8();
  uint32_t u32();
  int64_t i64();
  std::string str(size_t max_bytes);
  Bytes bytes(size_t max_bytes);
  bool done() const { return p_ == end_; }

 private:
  const uint8_t* take(size_t n);
  const uint8_t* p_;
  const uint8_t* end_;
};

uint32_t read_u32_le(const uint8_t* p);

}  // namespace mt::dist::detail
