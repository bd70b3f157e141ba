// Sharded checkpoints: each rank writes the pieces of state it holds (nn/sharded_state.h) to a file
// of its own, in parallel, and rank 0 then writes a small index. load_checkpoint (nn/checkpoint.h)
// reads such an index as it reads a single file: it consolidates the shards into one Checkpoint.
//
// Note [Sharded checkpoints]: one checkpoint is
//   <dir>/checkpoint-epoch-000002.safetensors                    the index, written last
//   <dir>/checkpoint-epoch-000002.shards/shard-00000-of-00002.safetensors   rank 0's pieces
//   <dir>/checkpoint-epoch-000002.shards/shard-00001-of-00002.safetensors   rank 1's pieces
// Writing takes three steps: (1) every rank writes its shard file, atomically (save_safetensors:
// a temporary file, then a rename), all at once; (2) the caller carries every rank's table (what
// save_checkpoint_shard returns) to rank 0 with a collective, which no rank leaves before every shard
// is complete; (3) rank 0 writes the index, atomically. The index has an ordinary checkpoint's name
// (Note [Checkpoint names]), so it is what a folder listing, --resume auto and pruning see: a crash
// before (3) leaves no checkpoint, only a folder of shards that nothing reads and the next pruning
// removes (prune_checkpoints). A save over an existing checkpoint of the same name replaces its
// shards one by one before its index: in between, the old index no longer matches its shards, so
// that checkpoint reads as damaged (below), never as a mix.
//
// The index is a safetensors file without tensors; its metadata is a checkpoint's (format
// "minitrain-sharded-checkpoint-1", the counters, info/), plus "world" (the shard files), "stage"
// (ZeRO's, or 0), "shards" (the folder's name, beside the index) and "shard.<RRRRR>", rank r's
// table: one line per piece, "<tensor name> [d0,d1,...] <offset> <numel> <crc32c>", the whole
// tensor's shape and the CRC32C of the piece's bytes. A shard file holds each piece as a 1-D tensor
// "<tensor name>@<offset>", and its own checksums (Note [Tensor checksums]).
//
// Reading checks, shard by shard: the file is there (missing: an error naming it), its bytes match
// its checksums (damage), and every line of its table names a tensor of the file with that many
// elements and that CRC32C (a shard of another save: a mismatch). Then each whole tensor is filled
// from its pieces, any copy of an element held twice; an element no piece holds is an error. Every
// reader assembles whole tensors: resuming at any world size cuts its own ranges from them (ZeRO's
// load_state_dict), at the cost of the whole state's memory for the moment of the load, as with a
// single file.
#pragma once

#include <string>
#include <vector>

#include "nn/checkpoint.h"
#include "nn/sharded_state.h"

namespace mt {

inline constexpr const char* kShardedFormat = "minitrain-sharded-checkpoint-1";  // the index's "format"

// "<dir>/X.safetensors" -> "<dir>/X.shards", and rank r's file in it.
std::string shards_folder(const std::string& index_path);
std::string shard_path(const std::string& index_path, int rank, int world);

// Every tensor of `c` as one whole piece, named as in a single-file checkpoint ("model/0.weight",
// "optimizer/param_groups.0.lr", ...).
std::vector<ShardPiece> whole_pieces(const Checkpoint& c);

// Step (1), on every rank: rank `rank`'s shard of the checkpoint whose index will be `index_path`.
// Piece names are file names ("optimizer/state.3.exp_avg"); a name with no piece anywhere is not in
// the checkpoint. Returns this shard's table, for step (2).
std::string save_checkpoint_shard(const std::string& index_path, int rank, int world,
                                  const std::vector<ShardPiece>& pieces);

// Step (3), on rank 0, after every shard is written: the index, with the counters and info of `c`
// (its tensors are in the shards), `tables[r]` rank r's table. `stage` is recorded for readers.
void save_sharded_index(const std::string& index_path, const Checkpoint& c, int stage,
                        const std::vector<std::string>& tables);

// The checkpoint an index read from `path` describes, consolidated (load_checkpoint calls it).
Checkpoint load_sharded_checkpoint(const SafetensorsFile& index, const std::string& path);

}  // namespace mt
