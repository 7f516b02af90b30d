#include "core/dtype.h"

#include "core/error.h"

namespace kvserve {

std::optional<DTypeInfo> dtype_info(uint32_t id) {
  switch (static_cast<DType>(id)) {
    case DType::F32: return DTypeInfo{"F32", 1, 4, true};
    case DType::F16: return DTypeInfo{"F16", 1, 2, true};
    case DType::BF16: return DTypeInfo{"BF16", 1, 2, true};
    case DType::Q4_0: return DTypeInfo{"Q4_0", 32, 18, true};
    case DType::Q4_1: return DTypeInfo{"Q4_1", 32, 20, true};
    case DType::Q5_0: return DTypeInfo{"Q5_0", 32, 22, true};
    case DType::Q5_1: return DTypeInfo{"Q5_1", 32, 24, true};
    case DType::Q8_0: return DTypeInfo{"Q8_0", 32, 34, true};
    case DType::Q8_1: return DTypeInfo{"Q8_1", 32, 36, false};
    case DType::Q2_K: return DTypeInfo{"Q2_K", 256, 84, true};
    case DType::Q3_K: return DTypeInfo{"Q3_K", 256, 110, true};
    case DType::Q4_K: return DTypeInfo{"Q4_K", 256, 144, true};
    case DType::Q5_K: return DTypeInfo{"Q5_K", 256, 176, true};
    case DType::Q6_K: return DTypeInfo{"Q6_K", 256, 210, true};
    case DType::Q8_K: return DTypeInfo{"Q8_K", 256, 292, false};
    case DType::IQ2_XXS:
      return DTypeInfo{"IQ2_XXS", 256, 66, true};
    case DType::IQ2_XS:
      return DTypeInfo{"IQ2_XS", 256, 74, true};
    case DType::IQ3_XXS:
      return DTypeInfo{"IQ3_XXS", 256, 98, true};
    case DType::IQ1_S:
      return DTypeInfo{"IQ1_S", 256, 50, true};
    case DType::IQ4_NL: return DTypeInfo{"IQ4_NL", 32, 18, true};
    case DType::IQ3_S:
      return DTypeInfo{"IQ3_S", 256, 110, true};
    case DType::IQ2_S:
      return DTypeInfo{"IQ2_S", 256, 82, true};
    case DType::IQ4_XS: return DTypeInfo{"IQ4_XS", 256, 136, true};
    case DType::IQ1_M:
      return DTypeInfo{"IQ1_M", 256, 56, true};
    case DType::MXFP4:
      return DTypeInfo{"MXFP4", 32, 17, true};
    // TQ is known so that a file using it is named in the error.
    case DType::TQ1_0: return DTypeInfo{"TQ1_0", 256, 54, false};
    case DType::TQ2_0:
      return DTypeInfo{"TQ2_0", 256, 66, false};
    case DType::I8: return DTypeInfo{"I8", 1, 1, false};
    case DType::I16: return DTypeInfo{"I16", 1, 2, false};
    case DType::I32: return DTypeInfo{"I32", 1, 4, false};
    case DType::I64: return DTypeInfo{"I64", 1, 8, false};
    case DType::F64: return DTypeInfo{"F64", 1, 8, false};
  }
  return std::nullopt;
}

DTypeInfo dtype_info(DType t) {
  auto info = dtype_info(static_cast<uint32_t>(t));
  if (!info) fail("unknown dtype id {}", static_cast<uint32_t>(t));
  return *info;
}

std::string_view dtype_name(DType t) { return dtype_info(t).name; }

size_t row_bytes(DType t, int64_t n) {
  const DTypeInfo info = dtype_info(t);
  return static_cast<size_t>(n / info.block_elems) * static_cast<size_t>(info.block_bytes);
}

}  // namespace kvserve
