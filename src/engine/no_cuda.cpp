// Builds without the CUDA backend: a CUDA run is refused with the reason.
#include "engine/sequence.h"

namespace df::engine {

namespace {
Error no_cuda() { return Error{"this build has no CUDA backend (configure with -DDISKFORMER_CUDA=ON)"}; }
}  // namespace

Result<std::unique_ptr<BackendModel>> open_cuda_backend(Model&, model::TensorSource&) { return no_cuda(); }
Result<CudaStreams> cuda_streams(const ModelFiles&, uint32_t, uint32_t, const GpuOptions&) { return no_cuda(); }
io::HostAllocator* cuda_host_allocator() { return nullptr; }

}  // namespace df::engine
