// What a microbatch brings a chunk, by name. The chunk declares its inputs (TransformerChunk::
// microbatch_inputs): i32 rows, each named after what the loader makes it from (train/
// microbatches.h), so that the pipeline's slots hold and hand them on without knowing them.
// Adding an input is a change in the model, which declares and reads it, and in the loader, which
// makes it from a host batch.
//
// The names the loader knows: "tokens", "targets", "position_ids" and "key_start" (packed
// documents), this CP rank's rows of each; "sequence_key_start", key_start's whole sequences in
// global position order; "shifted_X", (R, tokens) rows of X with row r shifted r + 1 to the left
// within each sequence (past its end: token 0, target −1, out of the loss), then this CP rank's.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tessel {

// The size of a microbatch on this rank and the documents it packs.
struct MicrobatchShape {
  int64_t tokens = 0;             // micro batch × T/CP
  bool packed_documents = false;  // the documents' position ids and attention starts come too
  int64_t sequence_tokens = 0;    // > 0 (packed documents under CP): micro batch × T
};

// When the chunk reads an input. Every slot holds the token and target rows, as the planner counts
// a slot, though only the first and the last chunk read them.
enum class InputRead { Never, Always, WithGradients };

struct MicrobatchInput {
  std::string name;
  std::string description;     // as memory reports list it
  std::vector<int64_t> shape;  // i32
  InputRead read = InputRead::Always;
};

// An input as the loader fills it: (numel) rows in the model's memory.
struct InputBuffer {
  std::string name;
  int32_t* rows = nullptr;
  int64_t numel = 0;
};

// A forward's inputs by name, in the model's memory: those it reads this time.
using InputRows = std::map<std::string, const int32_t*>;

// The rows of `name`, null when absent.
inline const int32_t* input_rows(const InputRows& rows, const std::string& name) {
  const auto it = rows.find(name);
  return it != rows.end() ? it->second : nullptr;
}

}  // namespace tessel
