#include "cuda_host_register.h"

#include <cuda_runtime_api.h>

#include "loom/error.h"
#include "loom/log.h"

namespace loom::cuda {

void host_register(void* p, size_t bytes, int device) {
  cudaError_t e = cudaSetDevice(device);
  LOOM_CHECK(e == cudaSuccess, "cudaSetDevice(", device, ") for the checkpoint host buffers: ", cudaGetErrorString(e));
  e = cudaHostRegister(p, bytes, cudaHostRegisterDefault);
  LOOM_CHECK(e == cudaSuccess, "cudaHostRegister of ", bytes, " bytes of checkpoint host buffers on cuda:", device, ": ",
             cudaGetErrorString(e), " (hint: page-locked memory is limited by RAM and `ulimit -l`)");
}

void host_unregister(void* p) noexcept {
  const cudaError_t e = cudaHostUnregister(p);
  if (e != cudaSuccess) log::warn("cudaHostUnregister of checkpoint host buffers: ", cudaGetErrorString(e));
}

}  // namespace loom::cuda
