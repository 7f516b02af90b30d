#include "kv/kv_layer_dtypes.h"

#include <charconv>
#include <string>

#include "core/error.h"

namespace kvserve {

namespace {

int parse_layer_index(std::string_view text, std::string_view item) {
  int v = 0;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end)
    fail("KV layer dtypes: '{}' in '{}' is not a layer index (0, 1, ...; -1 the last)", text, item);
  return v;
}

}  // namespace

std::vector<KVLayerDtype> parse_kv_layer_dtypes(std::string_view spec) {
  std::vector<KVLayerDtype> out;
  if (spec.empty()) return out;
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t comma = spec.find(',', start);
    const std::string_view item = spec.substr(start, comma == std::string_view::npos ? spec.size() - start : comma - start);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      fail("KV layer dtypes: '{}' is not LAYERS=DTYPE (e.g. 0=f16, -1=f16, 0:3=bf16)", item);
    const std::string_view range = item.substr(0, eq);
    KVLayerDtype d;
    const size_t colon = range.find(':');
    d.first = parse_layer_index(range.substr(0, colon), item);
    d.last = colon == std::string_view::npos ? d.first : parse_layer_index(range.substr(colon + 1), item);
    try {
      d.dtype = parse_kv_dtype(item.substr(eq + 1));
    } catch (const Error& e) {
      fail("KV layer dtypes: '{}': {}", item, e.what());
    }
    out.push_back(d);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<KVCacheDType> resolve_kv_layer_dtypes(const std::vector<KVLayerDtype>& items, int n_layers,
                                                  KVCacheDType fallback) {
  std::vector<KVCacheDType> out(static_cast<size_t>(n_layers), fallback);
  for (const KVLayerDtype& d : items) {
    const int first = d.first < 0 ? n_layers + d.first : d.first;
    const int last = d.last < 0 ? n_layers + d.last : d.last;
    if (first < 0 || first >= n_layers || last < 0 || last >= n_layers)
      fail("KV layer dtypes: layers {}:{} are outside the model's {} layers (0:{}, or -{}:-1)", d.first, d.last,
           n_layers, n_layers - 1, n_layers);
    if (first > last) fail("KV layer dtypes: the range {}:{} runs backwards (layers {} to {})", d.first, d.last, first, last);
    for (int l = first; l <= last; ++l) out[static_cast<size_t>(l)] = d.dtype;
  }
  return out;
}

}  // namespace kvserve
