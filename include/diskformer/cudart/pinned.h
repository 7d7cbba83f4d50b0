// Page-locked host memory for the weights a GPU run streams: copies from it to the GPU run at the link's speed as
// DMA, where copies from pageable memory go through the driver's staging buffers at a fraction of it.
#pragma once

#include "diskformer/io/buffer.h"

namespace df::cuda {

// cudaHostAlloc'd memory (portable to every context). Errors name the size and the runtime's reason; a machine
// whose locked-memory limit is lower than the request fails here, not later.
io::HostAllocator& pinned_host_allocator();

}  // namespace df::cuda
