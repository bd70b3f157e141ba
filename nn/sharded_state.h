// A rank's share of state that is split over ranks: pieces of whole tensors, each a flat range of
// one named tensor. What ZeRO's optimizer (distributed/zero/zero.h) holds of the optimizer state is
// a list of such pieces, and a sharded checkpoint (nn/sharded_checkpoint.h) is written from them and
// read back into whole tensors, without knowing who cut them.
//
//   whole tensor "state.3.exp_avg", shape (4, 5): 20 elements, flattened row-major
//     rank 0: ShardPiece{"state.3.exp_avg", (4, 5), offset 0,  data: 12 elements}
//     rank 1: ShardPiece{"state.3.exp_avg", (4, 5), offset 12, data:  8 elements}
//
// Pieces of one tensor may overlap (elements that every rank holds alike, such as the tails of
// Note [ZeRO shards]); whoever reads them back takes any one copy. A 0-dim tensor (a step count) is
// a piece of shape () at offset 0 holding its one element.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace mt {

struct ShardPiece {
  std::string name;    // the whole tensor's name
  Shape shape;         // the whole tensor's shape
  int64_t offset = 0;  // where `data` starts in the whole tensor, flattened
  Tensor data{};       // 1-D: elements [offset, offset + data.numel()) of the whole tensor
};

// What one rank holds of a state dict that is split over ranks.
struct LocalShard {
  std::vector<ShardPiece> pieces;           // this rank's ranges
  std::map<std::string, Tensor> replicated; // entries every rank holds whole and alike (hyperparameters)
};

}  // namespace mt
