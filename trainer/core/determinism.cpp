#include "determinism.h"

#include <ATen/Context.h>

#include "loom/error.h"
#include "loom/log.h"
#include "loom/sys.h"

namespace loom {

void enable_deterministic_mode() {
  // The two settings cuBLAS documents as deterministic; LibTorch accepts either.
  const std::string cublas = sys::get_env("CUBLAS_WORKSPACE_CONFIG");
  LOOM_CHECK(cublas.empty() || cublas == ":4096:8" || cublas == ":16:8", "job.deterministic=true needs "
             "CUBLAS_WORKSPACE_CONFIG=:4096:8 or :16:8 (a fixed cuBLAS workspace), the environment sets '", cublas, "'");
  if (cublas.empty()) sys::set_env("CUBLAS_WORKSPACE_CONFIG", ":4096:8");
  const std::string nvls = sys::get_env("NCCL_NVLS_ENABLE");
  LOOM_CHECK(nvls.empty() || nvls == "0", "job.deterministic=true: NCCL_NVLS_ENABLE=", nvls,
             " reduces in the NVLink switch in no fixed order; unset it or set 0");
  if (nvls.empty()) sys::set_env("NCCL_NVLS_ENABLE", "0");
  at::Context& ctx = at::globalContext();
  ctx.setDeterministicAlgorithms(true, /*warn_only=*/false);
  ctx.setDeterministicCuDNN(true);
  ctx.setBenchmarkCuDNN(false);
  log::info("job.deterministic: LibTorch's deterministic algorithms and cuDNN, CUBLAS_WORKSPACE_CONFIG=",
            sys::get_env("CUBLAS_WORKSPACE_CONFIG"), ", NCCL_NVLS_ENABLE=0");
}

}  // namespace loom
