// cudaHostRegister / cudaHostUnregister, wrapped once (LOOM_CUDA builds only: the .cpp is compiled
// there alone). Used by HostBlock (host_block.h).
#pragma once

#include <cstddef>

namespace loom::cuda {

// Page-locks [p, p + bytes) for copies with `device` (cudaSetDevice on the calling thread first:
// a thread's current device starts at 0, and registering there would make a context on GPU 0).
// Throws loom::Error with CUDA's message.
void host_register(void* p, size_t bytes, int device);
// Best effort (for destructors): a failure is logged, not thrown.
void host_unregister(void* p) noexcept;

}  // namespace loom::cuda
