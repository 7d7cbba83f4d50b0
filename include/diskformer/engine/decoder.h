// One sequence's forward passes and token choice behind one small interface, so that the generation loop
// (generate.h), run and chat drive the CPU engine or a GPU session alike. Implementations: CpuDecoder below (an
// engine::Session), cuda::GpuDecoder (backend/cuda/gpu_decoder.h, only in CUDA builds).
//
//   engine::CpuDecoder d(model);
//   DF_TRY(d.eval(prompt_ids));
//   int32_t next = d.next_token(sampler, history);
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "diskformer/engine/model.h"
#include "diskformer/engine/sampler.h"
#include "diskformer/util/result.h"

namespace df::engine {

// What a run's stats line reports about where it ran.
struct DecoderStats {
  std::string backend;                       // "cpu" or "cuda"
  std::string device;                        // the GPU's name; empty on the CPU
  std::optional<uint64_t> device_bytes;      // GPU memory this decoder holds: weights, KV cache, work buffers
  std::optional<uint64_t> device_used_peak;  // driver-reported use of the whole device, peak of its samples
  // Experts streamed through a GPU cache (--gpu-budget): its hit rate and the bytes copied to the device.
  std::optional<double> expert_hit_rate;
  std::optional<uint64_t> bytes_to_device;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Runs tokens after the n_past() cached positions. Errors: context overflow, a token outside the vocabulary.
  virtual Status eval(std::span<const int32_t> tokens) = 0;
  // The token after the last eval, chosen by the sampler's rules (history: the tokens so far, for the repeat
  // penalty); every backend returns what sampler.sample() returns on the same logits with the same seed.
  virtual int32_t next_token(Sampler& sampler, std::span<const int32_t> history) = 0;
  virtual uint32_t n_past() const = 0;
  virtual uint32_t n_ctx() const = 0;
  // Forgets positions from n_keep on; the kept positions' cache entries stay (a shared prefix is reused).
  virtual void truncate(uint32_t n_keep) = 0;
  virtual DecoderStats stats() = 0;
};

// The CPU engine: a Session of its own, or one the caller owns (which must outlive the decoder).
class CpuDecoder final : public Decoder {
 public:
  explicit CpuDecoder(Model& model);
  explicit CpuDecoder(Session& session) : s_(session) {}

  Status eval(std::span<const int32_t> tokens) override { return s_.eval(tokens); }
  int32_t next_token(Sampler& sampler, std::span<const int32_t> history) override;
  uint32_t n_past() const override { return s_.n_past(); }
  uint32_t n_ctx() const override { return s_.n_ctx(); }
  void truncate(uint32_t n_keep) override { s_.truncate(n_keep); }
  DecoderStats stats() override { return {.backend = "cpu"}; }
  Session& session() { return s_; }

 private:
  std::unique_ptr<Session> owned_;
  Session& s_;
};

}  // namespace df::engine
