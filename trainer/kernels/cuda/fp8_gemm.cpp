// fp8_weight_grad (kernels.h): an FP8 linear's weight gradient in one cuBLASLt GEMM, added into
// the gradient it already has where asked (beta 1), which ATen's _scaled_mm cannot do.
//
// cuBLASLt is column-major. The row-major x_t [in, N] is the column-major [N, in] (ld N), dy_t
// [out, N] the column-major [N, out] (ld N), dw [out, in] the column-major [in, out] (ld in).
// So D [in, out] = op(A) [in, N] * B [N, out] with A = x_t transposed (TRANSA T) and B = dy_t as
// it is (TRANSB N): m = in, n = out, k = N, D(i, o) = sum_n x_t[i][n] dy_t[o][n] = dw[o][i]. Both
// operands are K-major ("TN"), the only layout Hopper's FP8 kernels take; A e4m3 and B e5m2 is one
// of the type pairs they take (two e5m2 is not).
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "kernels.h"

namespace loom::cuda {
namespace {

// cuBLASLt's entry points, bound at run time to the libcublasLt the process already has: the one
// LibTorch's libcublas loaded. libcublas calls into libcublasLt and needs the one of its own
// release; linking the toolkit's copy here would make the loader hand that copy to LibTorch's
// libcublas too (one soname, one library in the process), of whatever release the toolkit is.
class Library {
 public:
  Library() {
    const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
    dl_.h = dlopen(soname.c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (dl_.h == nullptr) dl_.h = dlopen(soname.c_str(), RTLD_NOW);  // no LibTorch cuBLAS loaded yet
    bound_ = dl_.h != nullptr && bind(create, "cublasLtCreate") && bind(destroy, "cublasLtDestroy") &&
             bind(status_name, "cublasLtGetStatusName") && bind(status_string, "cublasLtGetStatusString") &&
             bind(desc_create, "cublasLtMatmulDescCreate") && bind(desc_destroy, "cublasLtMatmulDescDestroy") &&
             bind(desc_set, "cublasLtMatmulDescSetAttribute") && bind(layout_create, "cublasLtMatrixLayoutCreate") &&
             bind(layout_destroy, "cublasLtMatrixLayoutDestroy") &&
             bind(pref_create, "cublasLtMatmulPreferenceCreate") &&
             bind(pref_destroy, "cublasLtMatmulPreferenceDestroy") &&
             bind(pref_set, "cublasLtMatmulPreferenceSetAttribute") &&
             bind(heuristic, "cublasLtMatmulAlgoGetHeuristic") && bind(matmul, "cublasLtMatmul");
  }
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  // Whether every entry point below was found.
  bool bound() const { return bound_; }

  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtDestroy) destroy = nullptr;
  decltype(&cublasLtGetStatusName) status_name = nullptr;
  decltype(&cublasLtGetStatusString) status_string = nullptr;
  decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;

 private:
  template <typename F>
  bool bind(F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(dl_.h, name));
    return f != nullptr;
  }
  struct Dl {
    void* h = nullptr;
    ~Dl() {
      if (h != nullptr) dlclose(h);
    }
  } dl_;  // first member: closed after everything else
  bool bound_ = false;
};

// The process's one Library, opened on first use.
const Library& library() {
  static const Library lib;
  return lib;
}

// A cuBLASLt object destroyed with its owner.
template <typename T>
class Owned {
 public:
  using Destroy = cublasStatus_t (*)(T);
  explicit Owned(Destroy destroy) : destroy_(destroy) {}
  ~Owned() {
    if (h_ != nullptr) destroy_(h_);
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  T* out() { return &h_; }
  T get() const { return h_; }

 private:
  Destroy destroy_;
  T h_ = nullptr;
};
using Handle = Owned<cublasLtHandle_t>;
using MatmulDesc = Owned<cublasLtMatmulDesc_t>;
using Layout = Owned<cublasLtMatrixLayout_t>;
using Preference = Owned<cublasLtMatmulPreference_t>;

// The first failing call of a sequence chained with &&: `s.ok(call(...), "call") && ...`.
// CUBLAS_STATUS_NOT_SUPPORTED and _ARCH_MISMATCH mean no kernel for the case or the device (the
// caller computes another way); any other failure is an error, with its text in a per-thread buffer that lives until the
// thread's next failure (the caller reports it at once).
class Steps {
 public:
  bool ok(cublasStatus_t s, const char* call) {
    if (s == CUBLAS_STATUS_SUCCESS) return true;
    status_ = s;
    call_ = call;
    return false;
  }
  bool ok(cudaError_t e, const char* call) {
    if (e == cudaSuccess) return true;
    cuda_ = e;
    call_ = call;
    return false;
  }
  GemmResult result() const {
    static thread_local std::string message;
    if (cuda_ != cudaSuccess) {
      message = std::string(call_) + ": " + cudaGetErrorString(cuda_);
      return {GemmStatus::kFailed, message.c_str()};
    }
    if (status_ == CUBLAS_STATUS_SUCCESS) return {GemmStatus::kDone, nullptr};
    if (status_ == CUBLAS_STATUS_NOT_SUPPORTED || status_ == CUBLAS_STATUS_ARCH_MISMATCH) {
      return {GemmStatus::kUnsupported, nullptr};
    }
    const Library& lt = library();
    message = std::string("cuBLASLt ") + call_ + ": " + lt.status_name(status_) + " (" + lt.status_string(status_) +
              ")";
    return {GemmStatus::kFailed, message.c_str()};
  }

 private:
  cublasStatus_t status_ = CUBLAS_STATUS_SUCCESS;
  cudaError_t cuda_ = cudaSuccess;
  const char* call_ = "";
};

// One cuBLASLt handle per device, created on the device's first call and kept for the process:
// a handle belongs to the device current at its creation, and holds no stream or workspace, so
// the threads and streams of one device share it. (Destroyed at exit before the Library closes:
// constructed after it.)
bool device_handle(Steps& s, cublasLtHandle_t* out) {
  const Library& lt = library();
  int device = 0;
  if (!s.ok(cudaGetDevice(&device), "cudaGetDevice")) return false;
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<Handle>> handles;
  const std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<Handle>& h = handles[device];
  if (h == nullptr) {
    auto created = std::make_unique<Handle>(lt.destroy);
    if (!s.ok(lt.create(created->out()), "cublasLtCreate")) return false;
    h = std::move(created);
  }
  *out = h->get();
  return true;
}

// The largest power of two up to 256 that divides the address: cuBLASLt's heuristic assumes 256
// unless told, and would pick kernels that need more than the buffers have.
uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t n = 1;
  while (n < 256 && a % (2 * n) == 0) n *= 2;
  return n;
}

template <typename V>
bool set(Steps& s, cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const V& value) {
  return s.ok(library().desc_set(d, attr, &value, sizeof(value)), "cublasLtMatmulDescSetAttribute");
}
template <typename V>
bool set(Steps& s, cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, const V& value) {
  return s.ok(library().pref_set(p, attr, &value, sizeof(value)), "cublasLtMatmulPreferenceSetAttribute");
}

// The operation: e4m3 A (x_t), e5m2 B (dy_t), bf16 C = D, fp32 accumulation and scale, TN, the
// two operands' scales from device pointers, no fast accumulation (the gradient's sums are long).
bool describe(Steps& s, MatmulDesc& desc, const float* scale_x, const float* scale_dy) {
  const cublasOperation_t yes = CUBLAS_OP_T, no = CUBLAS_OP_N;
  const int8_t fast_accum = 0;
  return s.ok(library().desc_create(desc.out(), CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate") &&
         set(s, desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, yes) && set(s, desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, no) &&
         set(s, desc.get(), CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast_accum) &&
         set(s, desc.get(), CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, scale_x) &&
         set(s, desc.get(), CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, scale_dy);
}

// What the heuristic may choose: kernels that fit the workspace and the buffers' alignments, and
// no split-K that adds its parts up in bf16 (in place or in the workspace): fp32 throughout.
bool prefer(Steps& s, Preference& pref, const void* dy_t, const void* x_t, const void* dw, size_t workspace_bytes) {
  const uint64_t bytes = workspace_bytes;
  const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  return s.ok(library().pref_create(pref.out()), "cublasLtMatmulPreferenceCreate") &&
         set(s, pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, bytes) &&
         set(s, pref.get(), CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, schemes) &&
         set(s, pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment(x_t)) &&
         set(s, pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment(dy_t)) &&
         set(s, pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment(dw)) &&
         set(s, pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment(dw));
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The heuristic's choice per device, shape, beta and the buffers' alignments: a step asks for the
// same few shapes thousands of times, and each heuristic query costs tens of microseconds of host.
using AlgoKey = std::tuple<int, int64_t, int64_t, int64_t, bool, uint32_t, uint32_t, uint32_t, size_t>;
struct Algos {
  std::mutex mutex;
  std::map<AlgoKey, cublasLtMatmulHeuristicResult_t> found;  // state SUCCESS, or none for the case
};
Algos& algos() {
  static Algos a;
  return a;
}

}  // namespace

GemmResult fp8_weight_grad(const void* dy_t, const void* x_t, const float* scale_dy, const float* scale_x, int64_t N,
                           int64_t in, int64_t out, void* dw, bool accumulate, void* workspace, size_t workspace_bytes,
                           void* stream) {
  if (N <= 0 || in <= 0 || out <= 0 || N % 16 != 0 || in % 16 != 0 || out % 16 != 0 || !aligned16(dy_t) ||
      !aligned16(x_t) || !aligned16(dw) || (workspace_bytes > 0 && !aligned16(workspace))) {
    return {GemmStatus::kUnsupported, nullptr};
  }
  const Library& lt = library();
  if (!lt.bound()) return {GemmStatus::kUnsupported, nullptr};  // no cuBLASLt in this process
  Steps s;
  cublasLtHandle_t handle = nullptr;
  int device = 0;
  MatmulDesc desc(lt.desc_destroy);
  Layout a(lt.layout_destroy), b(lt.layout_destroy), d(lt.layout_destroy);
  const uint64_t n = static_cast<uint64_t>(N), rows_in = static_cast<uint64_t>(in), rows_out = static_cast<uint64_t>(out);
  const bool ready =
      device_handle(s, &handle) && s.ok(cudaGetDevice(&device), "cudaGetDevice") &&
      describe(s, desc, scale_x, scale_dy) &&
      s.ok(lt.layout_create(a.out(), CUDA_R_8F_E4M3, n, rows_in, N), "cublasLtMatrixLayoutCreate") &&
      s.ok(lt.layout_create(b.out(), CUDA_R_8F_E5M2, n, rows_out, N), "cublasLtMatrixLayoutCreate") &&
      s.ok(lt.layout_create(d.out(), CUDA_R_16BF, rows_in, rows_out, in), "cublasLtMatrixLayoutCreate");
  if (!ready) return s.result();
  const AlgoKey key{device, N, in, out, accumulate, alignment(x_t), alignment(dy_t), alignment(dw), workspace_bytes};
  cublasLtMatmulHeuristicResult_t heuristic = {};
  {
    Algos& cache = algos();
    const std::lock_guard<std::mutex> lock(cache.mutex);
    const auto it = cache.found.find(key);
    if (it != cache.found.end()) {
      heuristic = it->second;
    } else {
      Preference pref(lt.pref_destroy);
      int found = 0;
      if (!prefer(s, pref, dy_t, x_t, dw, workspace_bytes) ||
          !s.ok(lt.heuristic(handle, desc.get(), a.get(), b.get(), d.get(), d.get(), pref.get(), 1, &heuristic, &found),
                "cublasLtMatmulAlgoGetHeuristic")) {
        return s.result();
      }
      if (found == 0) heuristic.state = CUBLAS_STATUS_NOT_SUPPORTED;
      cache.found.emplace(key, heuristic);
    }
  }
  if (heuristic.state != CUBLAS_STATUS_SUCCESS) return {GemmStatus::kUnsupported, nullptr};
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;  // beta 0: C (= D) is not read
  s.ok(lt.matmul(handle, desc.get(), &alpha, x_t, a.get(), dy_t, b.get(), &beta, dw, d.get(), dw, d.get(),
                 &heuristic.algo, workspace, workspace_bytes, static_cast<cudaStream_t>(stream)),
       "cublasLtMatmul");
  return s.result();
}

}  // namespace loom::cuda
