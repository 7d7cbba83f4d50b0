// The K-quant, IQ4 and 32-element offset types on the device, read 32 elements at a time: whatever a type's block
// size, each 32-element piece of a row (a block of the 32-element types, a sub-block of a 256-element super-block)
// is decoded into 8 words of 4 signed 8-bit codes (elements 4k .. 4k+3 in word k, the order of a Q8_0 activation
// block's words) and, per half of 16 elements, a scale and an offset: element i = d[i / 16] * code_i + m[i / 16].
// The types whose scales cover 32 elements (all but Q2_K, Q3_K, Q6_K) give both halves the same pair.
//
// A piece's dot with a Q8_0 activation block (scale da, codes a) is then exact integer dot products per half (dp4a)
// and, for the types with offsets, the codes' sums (dp4a with ones), as llama.cpp's CUDA mat-vec reads its q8_1
// blocks' sums: da * (d0 * dot0 + d1 * dot1 + m0 * sum0 + m1 * sum1). Activations stay Q8_0 (the same scratch and
// quantizer as the Q4_0/Q8_0 kernels), so only the weights' decoding is per type.
//
// Layouts: include/diskformer/backend/cpu/numeric.h (the block structs) and cpu/dequant.cpp. Blocks of 18, 22, 110
// and 210 bytes leave pieces only 2-byte aligned, so a piece's words are read as spans of aligned words joined by
// funnel shifts (words()).
#pragma once

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "diskformer/gguf/types.h"

namespace df::cuda::kq {

using gguf::GgmlType;

// The types read here (Q4_0 and Q8_0 keep their own kernels' code, which other tests hold bit for bit; their pieces
// are read too, by the grouped tensor-core products alone: mmq.cu's grouped() says why).
__host__ __device__ constexpr bool piece_type(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::IQ4_NL:
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ4_XS: return true;
    default: return false;
  }
}

__host__ __device__ constexpr bool super_block(GgmlType t) {
  return t == GgmlType::Q2_K || t == GgmlType::Q3_K || t == GgmlType::Q4_K || t == GgmlType::Q5_K ||
         t == GgmlType::Q6_K || t == GgmlType::IQ4_XS;
}
// Elements per block: 256 for the super-block types, else 32.
__host__ __device__ constexpr int block_elems(GgmlType t) { return super_block(t) ? 256 : 32; }
__host__ __device__ constexpr int block_bytes(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: return 18;
    case GgmlType::Q8_0: return 34;
    case GgmlType::Q4_1: return 20;
    case GgmlType::Q5_0: return 22;
    case GgmlType::Q5_1: return 24;
    case GgmlType::IQ4_NL: return 18;
    case GgmlType::Q2_K: return 84;
    case GgmlType::Q3_K: return 110;
    case GgmlType::Q4_K: return 144;
    case GgmlType::Q5_K: return 176;
    case GgmlType::Q6_K: return 210;
    case GgmlType::IQ4_XS: return 136;
    default: return 0;
  }
}
__host__ __device__ constexpr bool has_offset(GgmlType t) {
  return t == GgmlType::Q4_1 || t == GgmlType::Q5_1 || t == GgmlType::Q2_K || t == GgmlType::Q4_K ||
         t == GgmlType::Q5_K;
}
// Whether the two halves of a piece may have different scales (sub-blocks of 16).
__host__ __device__ constexpr bool half_scales(GgmlType t) {
  return t == GgmlType::Q2_K || t == GgmlType::Q3_K || t == GgmlType::Q6_K;
}

struct Piece {
  int q[8];     // codes, 4 per word
  float d[2];   // scale of elements 0..15, 16..31
  float m[2];   // offset of each half (0 for the types without one)
};

// N consecutive words of codes from p (2-byte aligned at least): the aligned words over them, joined by funnel
// shifts, so N + 1 loads where 16-bit halves would take 2N. The last aligned word is read only where p is not 4-byte
// aligned, and it then holds the span's last byte: nothing past the aligned word that ends the span is touched.
// kA4: the caller knows p 4-byte aligned; kA16: 16-byte aligned (read 16 bytes at a time).
template <int N, bool kA4 = false, bool kA16 = false>
__device__ __forceinline__ void words(const uint8_t* p, uint32_t (&w)[N]) {
  if constexpr (kA16) {
    static_assert(N % 4 == 0);
#pragma unroll
    for (int k = 0; k < N / 4; ++k) {
      const uint4 v = reinterpret_cast<const uint4*>(p)[k];
      w[4 * k] = v.x, w[4 * k + 1] = v.y, w[4 * k + 2] = v.z, w[4 * k + 3] = v.w;
    }
  } else if constexpr (kA4) {
#pragma unroll
    for (int k = 0; k < N; ++k) w[k] = reinterpret_cast<const uint32_t*>(p)[k];
  } else {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const uint32_t* base = reinterpret_cast<const uint32_t*>(a & ~uintptr_t(3));
    const uint32_t sh = uint32_t(a & 3u) * 8u;
    uint32_t lo = base[0];
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const uint32_t hi = k + 1 < N || sh != 0 ? base[k + 1] : 0u;
      w[k] = __funnelshift_r(lo, hi, sh);
      lo = hi;
    }
  }
}

__device__ __forceinline__ float f16(const uint8_t* p) { return dev::f16_to_f32(*reinterpret_cast<const uint16_t*>(p)); }

// Bits 0..3 of x to bit 4 of bytes 0..3: a nibble of fifth bits made an addend of each code.
__device__ __forceinline__ uint32_t fifth_bits(uint32_t x) {
  return ((x & 1u) << 4) | ((x & 2u) << 11) | ((x & 4u) << 18) | ((x & 8u) << 25);
}

// The IQ4 table (cpu::kIQ4NLValues) as 4 words of bytes; a word of 4 indices (one per byte, 0..15) to their values:
// byte_perm picks by the low 3 bits from entries 0..7 and 8..15, bit 3 chooses between the two.
__device__ __forceinline__ uint32_t iq4_lookup(uint32_t idx) {
  constexpr uint32_t t0 = 0xbfad9881u, t1 = 0xf6eaddcfu;  // -127 -104 -83 -65 | -49 -35 -22 -10
  constexpr uint32_t t2 = 0x26190d01u, t3 = 0x71594535u;  // 1 13 25 38 | 53 69 89 113
  const uint32_t sel = (idx & 7u) | ((idx >> 4) & 0x70u) | ((idx >> 8) & 0x700u) | ((idx >> 12) & 0x7000u);
  const uint32_t lo = __byte_perm(t0, t1, sel), hi = __byte_perm(t2, t3, sel);
  const uint32_t pick = ((idx >> 3) & 0x01010101u) * 0xffu;
  return (hi & pick) | (lo & ~pick);
}

// Scale and min of sub-block j (0..7) of a Q4_K / Q5_K super-block (cpu::kquant_scale_min).
__device__ __forceinline__ void scale_min(int j, const uint8_t* s, int& sc, int& mn) {
  if (j < 4) {
    sc = s[j] & 63;
    mn = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Scale j (0..15) of a Q3_K super-block, bias included (cpu::q3_k_scale).
__device__ __forceinline__ int q3_scale(int j, const uint8_t* s) {
  const int low = j < 8 ? s[j] & 0x0f : s[j - 8] >> 4;
  const int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// Whether a type's pieces can be read as 32-bit words from blocks that start 4-byte aligned (every word of codes
// lies at a multiple of 4 inside its block, and the block length keeps the next block aligned).
__host__ __device__ constexpr bool word_aligned_blocks(GgmlType t) { return block_bytes(t) % 4 == 0; }

// Piece p (elements 32p .. 32p+31) of a row of type T. kA4: the row starts 4-byte aligned and
// word_aligned_blocks(T), so the words of codes are read whole.
template <GgmlType T, bool kA4 = false>
__device__ __forceinline__ Piece piece(const uint8_t* __restrict__ row, int64_t p) {
  static_assert(!kA4 || word_aligned_blocks(T));
  Piece o;
  if constexpr (!super_block(T)) {
    const uint8_t* b = row + p * block_bytes(T);
    const float d = f16(b);
    o.d[0] = o.d[1] = d;
    o.m[0] = o.m[1] = 0.0f;
    if constexpr (T == GgmlType::Q4_1 || T == GgmlType::Q5_1) o.m[0] = o.m[1] = f16(b + 2);
    if constexpr (T == GgmlType::Q8_0) {
      uint32_t w[8];
      words<8, kA4>(b + 2, w);
#pragma unroll
      for (int k = 0; k < 8; ++k) o.q[k] = int(w[k]);
      return o;
    }
    // The Q5 types' word of fifth bits (w[0]) lies right before their codes: one span.
    constexpr bool kQh = T == GgmlType::Q5_0 || T == GgmlType::Q5_1;
    uint32_t w[kQh ? 5 : 4];
    words<kQh ? 5 : 4, kA4>(b + (T == GgmlType::Q4_1 || T == GgmlType::Q5_1 ? 4 : 2), w);
    const uint32_t qh = kQh ? w[0] : 0u;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t c = w[k + (kQh ? 1 : 0)];
      uint32_t lo = c & 0x0f0f0f0fu, hi = (c >> 4) & 0x0f0f0f0fu;
      if constexpr (T == GgmlType::IQ4_NL) {
        lo = iq4_lookup(lo), hi = iq4_lookup(hi);
      } else if constexpr (T == GgmlType::Q4_0) {
        lo = __vsubss4(lo, 0x08080808u), hi = __vsubss4(hi, 0x08080808u);
      } else if constexpr (T == GgmlType::Q5_0 || T == GgmlType::Q5_1) {
        lo |= fifth_bits(qh >> (4 * k));
        hi |= fifth_bits(qh >> (16 + 4 * k));
        if constexpr (T == GgmlType::Q5_0) lo = __vsubss4(lo, 0x10101010u), hi = __vsubss4(hi, 0x10101010u);
      }
      o.q[k] = int(lo);
      o.q[k + 4] = int(hi);
    }
  } else {
    const int64_t sb = p / 8;
    const int j = int(p % 8);
    const uint8_t* b = row + sb * block_bytes(T);
    if constexpr (T == GgmlType::Q2_K) {
      const float d = f16(b + 80), dmin = f16(b + 82);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int sc = b[2 * j + h];
        o.d[h] = d * float(sc & 0x0f);
        o.m[h] = -(dmin * float(sc >> 4));
      }
      uint32_t qs[8];
      words<8, kA4>(b + 16 + 32 * (j / 4), qs);
      const int sh = 2 * (j % 4);
#pragma unroll
      for (int k = 0; k < 8; ++k) o.q[k] = int((qs[k] >> sh) & 0x03030303u);
    } else if constexpr (T == GgmlType::Q3_K) {
      const float d = f16(b + 108);
      o.d[0] = d * float(q3_scale(2 * j, b + 96));
      o.d[1] = d * float(q3_scale(2 * j + 1, b + 96));
      o.m[0] = o.m[1] = 0.0f;
      uint32_t qs[8], hm[8];
      words<8, kA4>(b + 32 + 32 * (j / 4), qs);
      words<8, kA4>(b, hm);
      const int sh = 2 * (j % 4);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const uint32_t lo = (qs[k] >> sh) & 0x03030303u;
        const uint32_t hb = (hm[k] >> j) & 0x01010101u;  // set: +0, clear: -4
        o.q[k] = int(__vsubss4(lo, (hb ^ 0x01010101u) << 2));
      }
    } else if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q5_K) {
      const float d = f16(b), dmin = f16(b + 2);
      int sc, mn;
      scale_min(j, b + 4, sc, mn);
      o.d[0] = o.d[1] = d * float(sc);
      o.m[0] = o.m[1] = -(dmin * float(mn));
      constexpr bool kQh = T == GgmlType::Q5_K;
      uint32_t qs[8], qh[kQh ? 8 : 1];
      words<8, kA4>(b + (kQh ? 48 : 16) + 32 * (j / 2), qs);
      if constexpr (kQh) words<8, kA4>(b + 16, qh);
      const int sh = 4 * (j % 2);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        uint32_t q = (qs[k] >> sh) & 0x0f0f0f0fu;
        if constexpr (kQh) q |= ((qh[k] >> j) & 0x01010101u) << 4;
        o.q[k] = int(q);
      }
    } else if constexpr (T == GgmlType::Q6_K) {
      const float d = f16(b + 208);
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
      o.d[0] = d * float(sc[2 * j]);
      o.d[1] = d * float(sc[2 * j + 1]);
      o.m[0] = o.m[1] = 0.0f;
      const int n = j / 4, g = j % 4;
      uint32_t ql[8], qh[8];
      words<8, kA4>(b + 64 * n + 32 * (g % 2), ql);
      words<8, kA4>(b + 128 + 32 * n, qh);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const uint32_t lo = (ql[k] >> (4 * (g / 2))) & 0x0f0f0f0fu;
        const uint32_t hi = (qh[k] >> (2 * g)) & 0x03030303u;
        o.q[k] = int(__vsubss4(lo | (hi << 4), 0x20202020u));
      }
    } else {  // IQ4_XS
      const float d = f16(b);
      const uint32_t sh = *reinterpret_cast<const uint16_t*>(b + 2);
      const int sc = (((b[4 + j / 2] >> (4 * (j % 2))) & 0x0f) | (((sh >> (2 * j)) & 3) << 4)) - 32;
      o.d[0] = o.d[1] = d * float(sc);
      o.m[0] = o.m[1] = 0.0f;
      uint32_t qs[4];
      words<4, kA4>(b + 8 + 16 * j, qs);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        o.q[k] = int(iq4_lookup(qs[k] & 0x0f0f0f0fu));
        o.q[k + 4] = int(iq4_lookup((qs[k] >> 4) & 0x0f0f0f0fu));
      }
    }
  }
  return o;
}

// Whether a type's pieces are decoded two at a time (piece_pair): Q4_K and Q5_K's pieces 2k and 2k + 1 are the low
// and high nibbles of one span of codes (and share Q5_K's fifth bits), Q6_K's pieces j and j + 2 the low and high
// nibbles of one span too (and their high bits one other span).
__host__ __device__ constexpr bool paired(GgmlType t) {
  return t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K;
}
// Piece h (0, 1) of pair k (0..3) of a stage of 8 pieces.
__host__ __device__ constexpr int pair_piece(GgmlType t, int k, int h) {
  return t == GgmlType::Q6_K ? 4 * (k / 2) + k % 2 + 2 * h : 2 * k + h;
}

// Pieces pair_piece(T, k, 0) and pair_piece(T, k, 1) of the super-block at b, equal to piece()'s: each word of codes
// and the header are read once for both. kA4 as piece()'s; kA16: b is 16-byte aligned too (Q4_K's 144-byte and
// Q5_K's 176-byte blocks in rows of a multiple of 16 bytes).
template <GgmlType T, bool kA4 = false, bool kA16 = false>
__device__ __forceinline__ void piece_pair(const uint8_t* __restrict__ b, int k, Piece (&o)[2]) {
  static_assert(paired(T) && (!kA4 || word_aligned_blocks(T)) && (!kA16 || kA4));
  if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q5_K) {
    // Header words: d and dmin, then the 12 bytes of 6-bit scales and mins (scale_min()'s s[0..11]).
    uint32_t h[4];
    words<4, kA4, kA16>(b, h);
    const float d = dev::f16_to_f32(uint16_t(h[0])), dmin = dev::f16_to_f32(uint16_t(h[0] >> 16));
    constexpr bool kQh = T == GgmlType::Q5_K;
    uint32_t qs[8], qh[kQh ? 8 : 1];
    words<8, kA4, kA16>(b + (kQh ? 48 : 16) + 32 * k, qs);
    if constexpr (kQh) words<8, kA4, kA16>(b + 16, qh);
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int j = 2 * k + e, sh = 8 * (j & 3);
      // scale_min(j): bytes j & 3 of s[0..3], s[4..7] and s[8..11].
      const uint32_t s0 = (h[1] >> sh) & 0xffu, s1 = (h[2] >> sh) & 0xffu, s2 = (h[3] >> sh) & 0xffu;
      const uint32_t sc = j < 4 ? s0 & 63u : (s2 & 0x0fu) | ((s0 >> 6) << 4);
      const uint32_t mn = j < 4 ? s1 & 63u : (s2 >> 4) | ((s1 >> 6) << 4);
      o[e].d[0] = o[e].d[1] = d * float(int(sc));
      o[e].m[0] = o[e].m[1] = -(dmin * float(int(mn)));
#pragma unroll
      for (int w = 0; w < 8; ++w) {
        uint32_t q = (qs[w] >> (4 * e)) & 0x0f0f0f0fu;
        if constexpr (kQh) q |= ((qh[w] >> j) & 0x01010101u) << 4;
        o[e].q[w] = int(q);
      }
    }
  } else {  // Q6_K: pieces 4n + g and 4n + g + 2
    const float d = f16(b + 208);
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
    const int n = k / 2, g = k % 2;
    uint32_t ql[8], qh[8];
    words<8, kA4>(b + 64 * n + 32 * g, ql);
    words<8, kA4>(b + 128 + 32 * n, qh);
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int j = 4 * n + g + 2 * e;
      o[e].d[0] = d * float(sc[2 * j]);
      o[e].d[1] = d * float(sc[2 * j + 1]);
      o[e].m[0] = o[e].m[1] = 0.0f;
#pragma unroll
      for (int w = 0; w < 8; ++w) {
        const uint32_t lo = (ql[w] >> (4 * e)) & 0x0f0f0f0fu;
        const uint32_t hi = (qh[w] >> (2 * (g + 2 * e))) & 0x03030303u;
        o[e].q[w] = int(__vsubss4(lo | (hi << 4), 0x20202020u));
      }
    }
  }
}

// acc + the piece's dot with a Q8_0 activation block of scale da and codes a[0..7] (4 per word), in f32. Every
// rounding is explicit (the final multiply-add fused), so the kernels that inline this sum alike bit for bit.
template <GgmlType T>
__device__ __forceinline__ float piece_dot(const Piece& w, const int (&a)[8], float da, float acc) {
  int p0 = 0, p1 = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) p0 = __dp4a(w.q[k], a[k], p0), p1 = __dp4a(w.q[k + 4], a[k + 4], p1);
  float s;
  if constexpr (half_scales(T)) s = fmaf(w.d[1], float(p1), __fmul_rn(w.d[0], float(p0)));
  else s = __fmul_rn(w.d[0], float(p0 + p1));
  if constexpr (has_offset(T)) {
    int s0 = 0, s1 = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) s0 = __dp4a(0x01010101, a[k], s0), s1 = __dp4a(0x01010101, a[k + 4], s1);
    if constexpr (half_scales(T)) s = fmaf(w.m[1], float(s1), fmaf(w.m[0], float(s0), s));
    else s = fmaf(w.m[0], float(s0 + s1), s);
  }
  return fmaf(da, s, acc);
}

// Element i (0..31) of a decoded piece with cpu::dequantize_row's roundings (the product, then the offset added).
__device__ __forceinline__ float piece_value(const Piece& w, int i) {
  const int q = int(int8_t(uint32_t(w.q[i / 4]) >> (8 * (i % 4))));
  return __fadd_rn(__fmul_rn(w.d[i / 16], float(q)), w.m[i / 16]);
}

}  // namespace df::cuda::kq
