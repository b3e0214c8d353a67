// job.deterministic: the same seed, data, world size and hardware give bitwise the same losses and
// weights on every run. What that takes is process-wide state, set once before the first CUDA or
// NCCL call (train() does it before the communicator exists):
//   - LibTorch's deterministic algorithms: an op with a deterministic implementation uses it (index
//     and scatter accumulation sort instead of adding atomically; FlashAttention-2's backward keeps
//     one dQ accumulator per key block and sums them in order), and an op without one throws
//     instead of running; deterministic cuDNN without autotuning;
//   - cuBLAS with a fixed workspace (CUBLAS_WORKSPACE_CONFIG=:4096:8; LibTorch refuses matmuls in
//     this mode without it): cuBLAS then picks the same reduction order every call;
//   - NCCL without NVLS (NVLink SHARP adds in the switch, in no fixed order).
// The attention kernel is the other half: choose_attention takes FlashAttention-2 (cuDNN's
// attention backward has no deterministic mode in LibTorch). loom's own CUDA kernels add in a fixed
// order in both modes (no floating-point atomics; amax's atomic max is order-free).
#pragma once

namespace loom {

// Sets the state above; throws loom::Error when the environment already asks for what defeats it
// (another CUBLAS_WORKSPACE_CONFIG, NCCL_NVLS_ENABLE=1). Logs one line of what it set.
void enable_deterministic_mode();

}  // namespace loom
