// A model chunk's parameters in units, as fully sharded data parallelism gathers and frees them
// (parallel/fully_sharded.h): the embedding, each layer, the head, the multi-token-prediction
// layers. A unit is what one call computes with at a time, so at most a unit or two (the one
// computing, the next one arriving) is whole on a rank; smaller units (a linear) would gather in
// many more, smaller messages, and larger ones (several layers) would hold more memory whole.
//
// The chunk calls the hooks around each unit's computation: acquire before it computes with the
// weights (its forward, its backward's input gradient; the weight gradients need no weights),
// release after, and grads_written once a microbatch's backward has written the unit's
// gradients. Without hooks (no sharding) it calls nothing.
#pragma once

#include <string>
#include <vector>

namespace tessel {

struct WeightUnit {
  std::string name;         // "embedding", "layer 3", "head", "mtp"
  std::vector<int> params;  // registry indices
  // Parameters of other units it computes with: a tied head's (or the MTP layers') word
  // embeddings, the MTP layers' LM head. Acquired and released with it.
  std::vector<int> reads;
  // Whether its backward computes with its weights (the embedding's only adds rows of gradient).
  bool backward_needs_weights = true;
};

class WeightUnitHooks {
 public:
  virtual ~WeightUnitHooks() = default;
  // The unit's parameters and those it reads are whole from acquire to release: for a forward
  // (backward false) or a backward's input gradient (backward true).
  virtual void acquire(int unit, bool backward) = 0;
  virtual void release(int unit, bool backward) = 0;
  // A microbatch's backward has written the unit's gradients (parts may come later in the step:
  // another microbatch's, a tied head's).
  virtual void grads_written(int unit) = 0;
};

}  // namespace tessel
