#pragma once
// Per-layer KV cache element types from the command line: "0=f16,-1=f16" keeps the first and last layers
// at f16 while the rest take --kv-cache-dtype (int8, say), "0:3=bf16" a range. Layers count from 0; a
// negative index counts from the end (-1 the last), so one spelling fits models of any depth.
#include <string_view>
#include <vector>

#include "kv/kv_layout.h"

namespace kvserve {

struct KVLayerDtype {
  int first = 0;  // inclusive; negative: from the end
  int last = 0;   // inclusive; negative: from the end
  KVCacheDType dtype = KVCacheDType::F16;
};

// Parses "RANGE=DTYPE[,RANGE=DTYPE...]" (RANGE: I or I:J); throws Error naming the bad item.
std::vector<KVLayerDtype> parse_kv_layer_dtypes(std::string_view spec);

// One dtype per layer: `fallback` where no item names the layer, else the last item naming it. Throws Error
// when an item's layers are outside [0, n_layers) or its range runs backwards.
std::vector<KVCacheDType> resolve_kv_layer_dtypes(const std::vector<KVLayerDtype>& items, int n_layers,
                                                  KVCacheDType fallback);

}  // namespace kvserve
