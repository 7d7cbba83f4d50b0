#include "diskformer/convert/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "diskformer/util/check.h"

namespace df::convert {

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t abs = x & 0x7fffffff;
  if (abs >= 0x7f800000) return static_cast<uint16_t>(sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0));  // inf, nan
  const int32_t exp = static_cast<int32_t>(abs >> 23) - 127 + 15;
  uint32_t mant = abs & 0x7fffff;
  if (exp <= 0) {  // subnormal or zero in half precision
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000;
    const uint32_t shift = static_cast<uint32_t>(14 - exp);
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00);
  uint32_t half = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;  // a carry into the exponent is still correct
  return static_cast<uint16_t>(sign | half);
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) mant <<= 1, --exp;
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000 | (mant << 13);
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void quantize_q8_0(const float* x, int64_t n, uint8_t* out) {
  DF_CHECK(n % kBlockElems == 0);
  for (int64_t b = 0; b < n / kBlockElems; ++b, x += kBlockElems, out += kQ8_0BlockBytes) {
    float amax = 0.0f;
    for (int i = 0; i < kBlockElems; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = f32_to_f16(d);
    std::memcpy(out, &dh, 2);
    for (int i = 0; i < kBlockElems; ++i) out[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::roundf(x[i] * id)));
  }
}

void quantize_q4_0(const float* x, int64_t n, uint8_t* out) {
  DF_CHECK(n % kBlockElems == 0);
  for (int64_t b = 0; b < n / kBlockElems; ++b, x += kBlockElems, out += kQ4_0BlockBytes) {
    // The value of largest magnitude keeps its sign, so that it maps to code 0 (-8 * d) exactly.
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < kBlockElems; ++i)
      if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = f32_to_f16(d);
    std::memcpy(out, &dh, 2);
    for (int j = 0; j < kBlockElems / 2; ++j) {
      const auto lo = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f))));
      const auto hi = static_cast<uint8_t>(
          std::min(15, static_cast<int>(static_cast<int8_t>(x[j + kBlockElems / 2] * id + 8.5f))));
      out[2 + j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void dequantize_q8_0(const uint8_t* in, int64_t n, float* x) {
  DF_CHECK(n % kBlockElems == 0);
  for (int64_t b = 0; b < n / kBlockElems; ++b, in += kQ8_0BlockBytes, x += kBlockElems) {
    uint16_t dh;
    std::memcpy(&dh, in, 2);
    const float d = f16_to_f32(dh);
    for (int i = 0; i < kBlockElems; ++i) x[i] = d * static_cast<float>(static_cast<int8_t>(in[2 + i]));
  }
}

void dequantize_q4_0(const uint8_t* in, int64_t n, float* x) {
  DF_CHECK(n % kBlockElems == 0);
  for (int64_t b = 0; b < n / kBlockElems; ++b, in += kQ4_0BlockBytes, x += kBlockElems) {
    uint16_t dh;
    std::memcpy(&dh, in, 2);
    const float d = f16_to_f32(dh);
    for (int j = 0; j < kBlockElems / 2; ++j) {
      x[j] = d * static_cast<float>((in[2 + j] & 15) - 8);
      x[j + kBlockElems / 2] = d * static_cast<float>((in[2 + j] >> 4) - 8);
    }
  }
}

Status encode(gguf::GgmlType type, std::span<const float> x, uint8_t* out) {
  const auto n = static_cast<int64_t>(x.size());
  switch (type) {
    case gguf::GgmlType::F32:
      std::memcpy(out, x.data(), x.size() * 4);
      return {};
    case gguf::GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return {};
    case gguf::GgmlType::Q8_0:
    case gguf::GgmlType::Q4_0:
      if (n % kBlockElems != 0)
        return Error{"cannot quantize " + std::to_string(n) + " values to " + std::string(gguf::type_name(type)) +
                     ": not a multiple of the block of 32"};
      if (type == gguf::GgmlType::Q8_0) quantize_q8_0(x.data(), n, out);
      else quantize_q4_0(x.data(), n, out);
      return {};
    default:
      return Error{"cannot encode type " + std::string(gguf::type_name(type)) + " (f32, f16, q8_0, q4_0)"};
  }
}

}  // namespace df::convert
