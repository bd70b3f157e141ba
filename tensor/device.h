// Device: where a tensor's bytes live. CPU, or CUDA with an index. Cheap to copy and compare.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace mt {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int16_t index = 0;  // CUDA ordinal; 0 for CPU

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(static_cast<int16_t>(i)) {}
  // Parses "cpu", "cuda", "cuda:1"; throws mt::Error on anything else.
  explicit Device(const std::string& spec);

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device&) const = default;
  std::string str() const;
};

constexpr Device kCPU{DeviceType::CPU, 0};
// cuda_device(1) is Device("cuda:1"). (Not named cuda(): namespace mt::cuda holds the CUDA backend's
// API, and a function may not share a name with a namespace.)
inline Device cuda_device(int index = 0) { return Device(DeviceType::CUDA, index); }

inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace mt
