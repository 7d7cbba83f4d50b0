// One cuBLAS handle per device for the whole process, created on the first use outside a graph capture and kept
// until exit (destroying it in a static destructor could run after the CUDA runtime has shut down). A mutex guards
// the handle's stream binding and the enqueue, so sessions on several threads may share it; the work itself runs
// asynchronously on the caller's stream.
//
// libcublas is opened on that first use rather than linked: a linked one is loaded and relocated, with libcublasLt,
// at every start of every diskformer process (CPU runs and --help included: about 0.3 s and 200 MB of mappings), and
// a process could not start at all where it is not installed. Without it the products take the built-in kernels.
#include "backend/cuda/blas.h"

#include <cublas_v2.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "diskformer/cudart/check.h"
#include "diskformer/util/check.h"

namespace df::cuda::blas {

namespace {

// The entry points this file calls (the header's macros name the _v2 ones), typed by the header's declarations.
struct Api {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  // The exported cublasGemmEx (the header adds an inline overload taking a cudaDataType compute type).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

template <typename F>
bool resolve(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

// The library of the toolkit the build used (DISKFORMER_CUBLAS_PATH), else whichever the loader finds by its soname;
// null, after one line on stderr, where neither loads or lacks an entry point.
const Api* api() {
  static const Api* loaded = []() -> const Api* {
    std::string why;
    void* lib = nullptr;
    for (const char* name : {DISKFORMER_CUBLAS_PATH, DISKFORMER_CUBLAS_SONAME}) {
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
      const char* e = dlerror();
      why = e ? e : name;
    }
    static Api a;
    const bool complete =
        lib != nullptr && resolve(lib, "cublasCreate_v2", a.create) &&
        resolve(lib, "cublasSetMathMode", a.set_math_mode) && resolve(lib, "cublasSetStream_v2", a.set_stream) &&
        resolve(lib, "cublasSetWorkspace_v2", a.set_workspace) && resolve(lib, "cublasSgemm_v2", a.sgemm) &&
        resolve(lib, "cublasGemmEx", a.gemm_ex) && resolve(lib, "cublasGetStatusString", a.status_string);
    if (lib != nullptr && !complete) {
      const char* e = dlerror();
      why = e ? e : "an entry point is missing";
      lib = nullptr;
    }
    if (lib == nullptr) {
      std::fprintf(stderr, "diskformer: cuBLAS not loaded (%s): float batch products use the built-in kernels\n",
                   why.c_str());
      return nullptr;
    }
    return &a;
  }();
  return loaded;
}

[[noreturn]] void blas_fail(const char* expr, cublasStatus_t st, const char* file, int line) {
  std::fprintf(stderr, "cuBLAS error %d (%s) at %s:%d: %s\n", int(st), api()->status_string(st), file, line, expr);
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
  const Api* cb = api();
  if (cb == nullptr) return false;
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
    DF_CUBLAS_CHECK(cb->create(&handle));
    // f32 products stay f32 (no TF32); f16 inputs still take the tensor cores.
    DF_CUBLAS_CHECK(cb->set_math_mode(handle, CUBLAS_DEFAULT_MATH));
  }
  DF_CUBLAS_CHECK(cb->set_stream(handle, stream));
  // No workspace: one shared workspace could be written by products running at once on different streams (and
  // set_stream has just reset it to the default pool).
  DF_CUBLAS_CHECK(cb->set_workspace(handle, nullptr, 0));
  enqueue(*cb, handle);
  return true;
}

constexpr int64_t kMax = 0x7fffffff;

}  // namespace

bool available(cudaStream_t stream) {
  return with_handle(stream, [](const Api&, cublasHandle_t) {}, /*probe=*/true);
}

bool sgemm_rows(const SgemmRowsArgs& a) {
  DF_CHECK(a.w != nullptr && a.x != nullptr && a.y != nullptr);
  DF_CHECK(a.rows > 0 && a.cols > 0 && a.n_tok > 0 && a.ld_w >= a.cols);
  if (a.rows > kMax || a.cols > kMax || a.n_tok > kMax || a.ld_w > kMax) return false;
  return with_handle(a.stream, [&](const Api& cb, cublasHandle_t handle) {
    // Column-major view: W is a cols x rows matrix with leading dimension ld_w, x a cols x n_tok one, y a rows x
    // n_tok one; y = W^T x.
    const float one = 1.0f, zero = 0.0f;
    DF_CUBLAS_CHECK(cb.sgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(a.rows), int(a.n_tok), int(a.cols), &one, a.w,
                             int(a.ld_w), a.x, int(a.cols), &zero, a.y, int(a.rows)));
  });
}

bool hgemm_rows(const HgemmRowsArgs& a) {
  DF_CHECK(a.w != nullptr && a.x != nullptr && a.y != nullptr);
  DF_CHECK(a.rows > 0 && a.cols > 0 && a.n_tok > 0 && a.ld_w >= a.cols && a.ld_y >= a.rows);
  if (a.rows > kMax || a.cols > kMax || a.n_tok > kMax || a.ld_w > kMax || a.ld_y > kMax) return false;
  return with_handle(a.stream, [&](const Api& cb, cublasHandle_t handle) {
    // As sgemm_rows, with y's leading dimension ld_y.
    const float one = 1.0f, zero = 0.0f;
    DF_CUBLAS_CHECK(cb.gemm_ex(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(a.rows), int(a.n_tok), int(a.cols), &one, a.w,
                               CUDA_R_16F, int(a.ld_w), a.x, CUDA_R_16F, int(a.cols), &zero, a.y, CUDA_R_32F,
                               int(a.ld_y), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  });
}

}  // namespace df::cuda::blas
