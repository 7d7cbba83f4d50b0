// One cuBLAS handle per device for the whole process, created on the first use outside a graph capture and kept
// until exit (destroying it in a static destructor could run after the CUDA runtime has shut down). A mutex guards
// the handle's stream binding and the enqueue, so sessions on several threads may share it; the work itself runs
// asynchronously on the caller's stream.
#include "backend/cuda/blas.h"

#include <cublas_v2.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "diskformer/cudart/check.h"
#include "diskformer/util/check.h"

namespace df::cuda::blas {

namespace {

[[noreturn]] void blas_fail(const char* expr, cublasStatus_t st, const char* file, int line) {
  std::fprintf(stderr, "cuBLAS error %d (%s) at %s:%d: %s\n", int(st), cublasGetStatusString(st), file, line, expr);
  std::abort();
}

#define DF_CUBLAS_CHECK(expr)                                                               \
  do {                                                                                      \
    cublasStatus_t df_blas_st_ = (expr);                                                    \
    if (df_blas_st_ != CUBLAS_STATUS_SUCCESS) blas_fail(#expr, df_blas_st_, __FILE__, __LINE__); \
  } while (0)

struct Handles {
  std::mutex mu;
  std::vector<cublasHandle_t> per_device;  // index: device ordinal; null until first use
};

Handles& handles() {
  static Handles* h = new Handles;  // never destroyed: see the file comment
  return *h;
}

// Runs enqueue(handle) with this device's handle bound to `stream`, under the lock; false (nothing run) when the
// handle does not exist yet and the stream is being captured, or `probe` asks only whether it would run.
template <typename Fn>
bool with_handle(cudaStream_t stream, Fn&& enqueue, bool probe = false) {
  int dev = 0;
  DF_CUDA_CHECK(cudaGetDevice(&dev));
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  DF_CUDA_CHECK(cudaStreamIsCapturing(stream, &cap));
  Handles& h = handles();
  std::lock_guard<std::mutex> lock(h.mu);
  if (size_t(dev) >= h.per_device.size()) h.per_device.resize(size_t(dev) + 1, nullptr);
  cublasHandle_t& handle = h.per_device[size_t(dev)];
  if (handle == nullptr && cap != cudaStreamCaptureStatusNone) return false;
  if (probe) return true;
  if (handle == nullptr) {
    DF_CUBLAS_CHECK(cublasCreate(&handle));
    // f32 products stay f32 (no TF32); f16 inputs still take the tensor cores.
    DF_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
  }
  DF_CUBLAS_CHECK(cublasSetStream(handle, stream));
  // No workspace: one shared workspace could be written by products running at once on different streams (and
  // cublasSetStream has just reset it to the default pool).
  DF_CUBLAS_CHECK(cublasSetWorkspace(handle, nullptr, 0));
  enqueue(handle);
  return true;
}

constexpr int64_t kMax = 0x7fffffff;

}  // namespace

bool available(cudaStream_t stream) {
  return with_handle(stream, [](cublasHandle_t) {}, /*probe=*/true);
}

bool sgemm_rows(const SgemmRowsArgs& a) {
  DF_CHECK(a.w != nullptr && a.x != nullptr && a.y != nullptr);
  DF_CHECK(a.rows > 0 && a.cols > 0 && a.n_tok > 0 && a.ld_w >= a.cols);
  if (a.rows > kMax || a.cols > kMax || a.n_tok > kMax || a.ld_w > kMax) return false;
  return with_handle(a.stream, [&](cublasHandle_t handle) {
    // Column-major view: W is a cols x rows matrix with leading dimension ld_w, x a cols x n_tok one, y a rows x
    // n_tok one; y = W^T x.
    const float one = 1.0f, zero = 0.0f;
    DF_CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(a.rows), int(a.n_tok), int(a.cols), &one, a.w,
                                int(a.ld_w), a.x, int(a.cols), &zero, a.y, int(a.rows)));
  });
}

bool hgemm_rows(const HgemmRowsArgs& a) {
  DF_CHECK(a.w != nullptr && a.x != nullptr && a.y != nullptr);
  DF_CHECK(a.rows > 0 && a.cols > 0 && a.n_tok > 0 && a.ld_w >= a.cols && a.ld_y >= a.rows);
  if (a.rows > kMax || a.cols > kMax || a.n_tok > kMax || a.ld_w > kMax || a.ld_y > kMax) return false;
  return with_handle(a.stream, [&](cublasHandle_t handle) {
    // As sgemm_rows, with y's leading dimension ld_y.
    const float one = 1.0f, zero = 0.0f;
    DF_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(a.rows), int(a.n_tok), int(a.cols), &one, a.w,
                                 CUDA_R_16F, int(a.ld_w), a.x, CUDA_R_16F, int(a.cols), &zero, a.y, CUDA_R_32F,
                                 int(a.ld_y), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  });
}

}  // namespace df::cuda::blas
