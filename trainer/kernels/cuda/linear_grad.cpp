// linear_grad_bf16 (kernels.h): dw = dy^T x and db = the column sums of dy in one cuBLASLt GEMM
// whose epilogue makes the bias gradient (CUBLASLT_EPILOGUE_BGRADB).
//
// cuBLASLt is column-major. The row-major x [N, in] is the column-major [in, N] (ld in), dy
// [N, out] the column-major [out, N] (ld out), dw [out, in] the column-major [in, out] (ld in).
// So D [in, out] = A [in, N] * op(B), with A = x (not transposed) and op(B) = B^T [N, out], B = dy:
// m = in, n = out, k = N, and D(i, o) = sum_n x[n][i] dy[n][o] = dw[o][i]. BGRADB sums op(B) over
// the GEMM's k: db[o] = sum_n dy[n][o], one value per column of D (the layout cuBLASLt's users,
// TransformerEngine and apex, give their weight-gradient GEMM with a bias).
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

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
  LinearGradResult result() const {
    static thread_local std::string message;
    if (cuda_ != cudaSuccess) {
      message = std::string(call_) + ": " + cudaGetErrorString(cuda_);
      return {LinearGradStatus::kFailed, message.c_str()};
    }
    if (status_ == CUBLAS_STATUS_SUCCESS) return {LinearGradStatus::kDone, nullptr};
    if (status_ == CUBLAS_STATUS_NOT_SUPPORTED || status_ == CUBLAS_STATUS_ARCH_MISMATCH) {
      return {LinearGradStatus::kUnsupported, nullptr};
    }
    const Library& lt = library();
    message = std::string("cuBLASLt ") + call_ + ": " + lt.status_name(status_) + " (" + lt.status_string(status_) +
              ")";
    return {LinearGradStatus::kFailed, message.c_str()};
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

// The operation: bf16 A, B and D, fp32 accumulation and scale, op(A) = A, op(B) = B^T, and the
// bias gradient of op(B) into db, in D's type (bf16; cuBLASLt's default bias type, left unset as
// TransformerEngine and apex leave it for 16-bit GEMMs).
bool describe(Steps& s, MatmulDesc& desc, void* db) {
  const cublasOperation_t no = CUBLAS_OP_N, yes = CUBLAS_OP_T;
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BGRADB;
  return s.ok(library().desc_create(desc.out(), CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate") &&
         set(s, desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, no) && set(s, desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, yes) &&
         set(s, desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue) &&
         set(s, desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, db);
}

// What the heuristic may choose: kernels that fit the workspace and the buffers' alignments, and
// no split-K that adds its parts up in bf16 (in place or in the workspace): fp32 throughout, one
// rounding per output.
bool prefer(Steps& s, Preference& pref, const void* dy, const void* x, const void* dw, size_t workspace_bytes) {
  const uint64_t bytes = workspace_bytes;
  const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  return s.ok(library().pref_create(pref.out()), "cublasLtMatmulPreferenceCreate") &&
         set(s, pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, bytes) &&
         set(s, pref.get(), CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, schemes) &&
         set(s, pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment(x)) &&
         set(s, pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment(dy)) &&
         set(s, pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment(dw)) &&
         set(s, pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment(dw));
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

LinearGradResult linear_grad_bf16(const void* dy, const void* x, int64_t N, int64_t in, int64_t out, void* dw,
                                  void* db, void* workspace, size_t workspace_bytes, void* stream) {
  // loom's own conditions: the tensor-core kernels' 16-byte rows and buffers (tested shapes only).
  if (N <= 0 || in <= 0 || out <= 0 || in % 8 != 0 || out % 8 != 0 || !aligned16(dy) || !aligned16(x) ||
      !aligned16(dw) || !aligned16(db) || (workspace_bytes > 0 && !aligned16(workspace))) {
    return {LinearGradStatus::kUnsupported, nullptr};
  }
  const Library& lt = library();
  if (!lt.bound()) return {LinearGradStatus::kUnsupported, nullptr};  // no cuBLASLt in this process
  Steps s;
  cublasLtHandle_t handle = nullptr;
  MatmulDesc desc(lt.desc_destroy);
  Layout a(lt.layout_destroy), b(lt.layout_destroy), d(lt.layout_destroy);
  Preference pref(lt.pref_destroy);
  cublasLtMatmulHeuristicResult_t heuristic = {};
  int found = 0;
  const uint64_t rows_n = static_cast<uint64_t>(N), rows_in = static_cast<uint64_t>(in),
                 rows_out = static_cast<uint64_t>(out);
  const bool ready =
      device_handle(s, &handle) && describe(s, desc, db) &&
      s.ok(lt.layout_create(a.out(), CUDA_R_16BF, rows_in, rows_n, in), "cublasLtMatrixLayoutCreate") &&
      s.ok(lt.layout_create(b.out(), CUDA_R_16BF, rows_out, rows_n, out), "cublasLtMatrixLayoutCreate") &&
      s.ok(lt.layout_create(d.out(), CUDA_R_16BF, rows_in, rows_out, in), "cublasLtMatrixLayoutCreate") &&
      prefer(s, pref, dy, x, dw, workspace_bytes) &&
      s.ok(lt.heuristic(handle, desc.get(), a.get(), b.get(), d.get(), d.get(), pref.get(), 1, &heuristic, &found),
           "cublasLtMatmulAlgoGetHeuristic");
  if (!ready) return s.result();
  if (found == 0 || heuristic.state != CUBLAS_STATUS_SUCCESS) return {LinearGradStatus::kUnsupported, nullptr};
  const float alpha = 1.0f, beta = 0.0f;  // beta 0: D is overwritten, C (= D) not read
  s.ok(lt.matmul(handle, desc.get(), &alpha, x, a.get(), dy, b.get(), &beta, dw, d.get(), dw, d.get(), &heuristic.algo,
                 workspace, workspace_bytes, static_cast<cudaStream_t>(stream)),
       "cublasLtMatmul");
  return s.result();
}

}  // namespace loom::cuda
