#include "cudnn_sdpa.h"

#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace loom::cuda {
namespace {

using Desc = cudnnBackendDescriptor_t;

// Every cuDNN call goes through here: a failure becomes an exception naming the call, with
// cuDNN's own last message.
void check(cudnnStatus_t status, const char* what) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  char last[1024] = {0};
  cudnnGetLastErrorString(last, sizeof(last));
  throw std::runtime_error(std::string("cuDNN ") + what + ": " + cudnnGetErrorString(status) +
                           (last[0] ? std::string(" (") + last + ")" : std::string()));
}

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Unique ids of the tensors a call binds (the rest are virtual or numbered after these).
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV,
  kSeqQ, kSeqKV, kQOff, kKVOff, kStatsOff,
  kScale, kNegInfPad, kNegInfCausal, kOne,
  kSoftmaxSum, kDQAccum, kBias,
  kFirstVirtual = 100,
};

// The descriptors of one graph, destroyed in reverse order of creation with it.
class Builder {
 public:
  ~Builder() {
    for (auto d = owned_.rbegin(); d != owned_.rend(); ++d) cudnnBackendDestroyDescriptor(*d);
  }

  Desc make(cudnnBackendDescriptorType_t type) {
    Desc d = nullptr;
    check(cudnnBackendCreateDescriptor(type, &d), "create descriptor");
    owned_.push_back(d);
    return d;
  }
  void set(Desc d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
           const void* values) {
    check(cudnnBackendSetAttribute(d, name, type, count, values), "set attribute");
  }
  void link(Desc d, cudnnBackendAttributeName_t name, Desc value) {
    set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value);
  }
  void finalize(Desc d, const char* what) { check(cudnnBackendFinalize(d), what); }

  struct TensorSpec {
    std::vector<int64_t> dims, strides;
    cudnnDataType_t type = CUDNN_DATA_FLOAT;
    bool is_virtual = true, by_value = false;
    Desc ragged = nullptr;
    int64_t uid = 0;  // 0: the next virtual id
  };
  Desc tensor(const TensorSpec& s) {
    Desc d = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t uid = s.uid ? s.uid : next_virtual_++;
    const int64_t alignment = 16;
    const int64_t rank = static_cast<int64_t>(s.dims.size());
    set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &s.type);
    set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, rank, s.dims.data());
    set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, rank, s.strides.data());
    set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    if (s.is_virtual) {
      const bool yes = true;
      set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes);
    }
    if (s.by_value) {
      const bool yes = true;
      set(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
    }
    if (s.ragged) link(d, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, s.ragged);
    finalize(d, "tensor");
    if (!s.is_virtual) bound_.push_back(uid);
    return d;
  }
  // A virtual tensor like `dims`/`strides` of another type.
  Desc virt(std::vector<int64_t> dims, std::vector<int64_t> strides, cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    return tensor({std::move(dims), std::move(strides), type, true, false, nullptr, 0});
  }
  Desc scalar(int64_t uid) {
    return tensor({{1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_FLOAT, false, true, nullptr, uid});
  }

  void add(Desc op) { ops_.push_back(op); }
  // Whether a call binds a tensor of this id (a non-virtual tensor of the graph).
  bool binds(int64_t uid) const { return std::find(bound_.begin(), bound_.end(), uid) != bound_.end(); }

  Desc pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t prec, Desc x, Desc b, Desc y, Desc t = nullptr,
                 int64_t axis = -1) {
    Desc pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    finalize(pw, "pointwise descriptor");
    Desc op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    link(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
    link(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b) link(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    if (t) link(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
    link(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    const float one = 1.0f;
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
    finalize(op, "pointwise operation");
    add(op);
    return y;
  }

  Desc reduction(cudnnReduceTensorOp_t how, Desc x, Desc y) {
    Desc r = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    const bool deterministic = false;
    set(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    set(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &how);
    set(r, CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, CUDNN_TYPE_BOOLEAN, 1, &deterministic);
    finalize(r, "reduction descriptor");
    Desc op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    link(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, r);
    link(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    link(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    finalize(op, "reduction operation");
    add(op);
    return y;
  }

  // C = A B over the last two dims; m, n, k: the seq_len tensors that bound the rows of A, the
  // columns of B and the inner dim (nullptr: the full dim).
  Desc matmul(Desc a, Desc b, Desc c, Desc m, Desc n, Desc k) {
    Desc mm = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    finalize(mm, "matmul descriptor");
    Desc op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    link(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    link(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
    link(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    link(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm);
    if (m) link(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, m);
    if (n) link(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, n);
    if (k) link(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, k);
    finalize(op, "matmul operation");
    add(op);
    return c;
  }

  Desc reshape(Desc x, Desc y) {
    Desc op = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    link(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
    link(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    finalize(op, "reshape operation");
    add(op);
    return y;
  }

  // The operation graph, cuDNN's heuristics (mode A, then the fallback list) and the first
  // execution plan that finalizes.
  Desc plan(cudnnHandle_t handle) {
    Desc graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops_.size()),
        ops_.data());
    set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    finalize(graph, "operation graph");
    std::string tried;
    for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      Desc heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
      link(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
      set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
      if (cudnnBackendFinalize(heur) != CUDNN_STATUS_SUCCESS) continue;
      int64_t count = 0;
      check(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                     nullptr),
            "heuristics count");
      std::vector<Desc> configs;
      for (int64_t i = 0; i < count; ++i) configs.push_back(make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
      check(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count,
                                     configs.data()),
            "heuristics results");
      for (int64_t i = 0; i < count; ++i) {
        Desc plan = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        link(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[static_cast<size_t>(i)]);
        const cudnnStatus_t st = cudnnBackendFinalize(plan);
        if (st == CUDNN_STATUS_SUCCESS) return plan;
        tried += std::string(tried.empty() ? "" : "; ") + cudnnGetErrorString(st);
      }
    }
    char last[1024] = {0};
    cudnnGetLastErrorString(last, sizeof(last));
    throw std::runtime_error("cuDNN has no engine for this attention graph (plans tried: " +
                             (tried.empty() ? std::string("none") : tried) + ")" +
                             (last[0] ? std::string(": ") + last : std::string()));
  }

 private:
  std::vector<Desc> owned_, ops_;
  std::vector<int64_t> bound_;
  int64_t next_virtual_ = kFirstVirtual;
};

// A cuDNN handle: one per graph, so a graph serves the thread that built it without locks.
struct Handle {
  cudnnHandle_t h = nullptr;
  Handle() { check(cudnnCreate(&h), "create handle"); }
  ~Handle() { cudnnDestroy(h); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
};

}  // namespace

struct SdpaGraph::Impl {
  Pass pass;
  SdpaShape shape;
  Handle handle;  // declared before the descriptors: destroyed after them
  Builder b;
  Desc plan = nullptr;
  int64_t plan_workspace = 0;

  Impl(Pass p, const SdpaShape& s) : pass(p), shape(s) { build(); }

  void build() {
    const int64_t B = shape.batch, S = shape.max_seq, H = shape.heads, K = shape.kv_heads, D = shape.head_dim;
    const cudnnDataType_t io = shape.fp16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
    const bool ragged = shape.ragged;
    auto offsets = [&](int64_t uid) -> Desc {
      if (!ragged) return nullptr;
      return b.tensor({{B + 1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_INT64, false, false, nullptr, uid});
    };
    Desc q_off = offsets(kQOff), kv_off = offsets(kKVOff), st_off = offsets(kStatsOff);
    Desc seq_q = nullptr, seq_kv = nullptr;
    if (ragged) {
      seq_q = b.tensor({{B, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_INT32, false, false, nullptr, kSeqQ});
      seq_kv = b.tensor({{B, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_INT32, false, false, nullptr, kSeqKV});
    }
    // Token-major rows: [B, heads, S, D] with the head stride D and the row stride heads * D.
    auto rows = [&](int64_t uid, int64_t heads, Desc off) {
      return b.tensor({{B, heads, S, D}, {S * heads * D, D, heads * D, 1}, io, false, false, off, uid});
    };
    // The same rows read transposed ([B, heads, D, S]), as the frontend describes K (and V in the backward).
    auto rows_t = [&](int64_t uid, int64_t heads, Desc off) {
      return b.tensor({{B, heads, D, S}, {S * heads * D, D, 1, heads * D}, io, false, false, off, uid});
    };
    const std::vector<int64_t> s_dims{B, H, S, S}, s_strides{H * S * S, S * S, S, 1};
    const std::vector<int64_t> r_dims{B, H, S, 1}, r_strides{H * S, S, 1, 1};
    auto stats_like = [&](int64_t uid) {
      return b.tensor({{B, H, S, 1}, {S * H, 1, H, 1}, CUDNN_DATA_FLOAT, false, false, st_off, uid});
    };
    Desc scale = b.scalar(kScale);
    Desc ninf_pad = ragged ? b.scalar(kNegInfPad) : nullptr, ninf_causal = b.scalar(kNegInfCausal);

    // Scores S = scale * Q K^T, masked to the sequence's rows and columns, then causally.
    auto masked_scores = [&](Desc q, Desc kt) {
      Desc s1 = b.matmul(q, kt, b.virt(s_dims, s_strides), seq_q, seq_kv, nullptr);
      Desc s2 = b.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, s1, scale, b.virt(s_dims, s_strides));
      if (shape.bias) {
        Desc bias = b.tensor({{B, 1, S, S}, {S * S, S * S, S, 1}, io, false, false, nullptr, kBias});
        s2 = b.pointwise(CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, s2, bias, b.virt(s_dims, s_strides));
      }
      if (!ragged) return s2;
      Desc row = b.pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, s2, nullptr,
                             b.virt(s_dims, s_strides, CUDNN_DATA_INT32), nullptr, 2);
      Desc col = b.pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, s2, nullptr,
                             b.virt(s_dims, s_strides, CUDNN_DATA_INT32), nullptr, 3);
      Desc rmask = b.pointwise(CUDNN_POINTWISE_CMP_LT, CUDNN_DATA_BOOLEAN, row, seq_q,
                               b.virt(s_dims, s_strides, CUDNN_DATA_BOOLEAN));
      Desc cmask = b.pointwise(CUDNN_POINTWISE_CMP_LT, CUDNN_DATA_BOOLEAN, col, seq_kv,
                               b.virt(s_dims, s_strides, CUDNN_DATA_BOOLEAN));
      Desc pmask = b.pointwise(CUDNN_POINTWISE_LOGICAL_AND, CUDNN_DATA_BOOLEAN, rmask, cmask,
                               b.virt(s_dims, s_strides, CUDNN_DATA_BOOLEAN));
      Desc s3 = b.pointwise(CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, s2, ninf_pad, b.virt(s_dims, s_strides),
                            pmask);
      return s3;
    };
    auto causal = [&](Desc s3) {
      Desc row = b.pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, s3, nullptr,
                             b.virt(s_dims, s_strides, CUDNN_DATA_INT32), nullptr, 2);
      Desc col = b.pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, s3, nullptr,
                             b.virt(s_dims, s_strides, CUDNN_DATA_INT32), nullptr, 3);
      Desc keep = b.pointwise(CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col,
                              b.virt(s_dims, s_strides, CUDNN_DATA_BOOLEAN));
      return b.pointwise(CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, s3, ninf_causal, b.virt(s_dims, s_strides),
                         keep);
    };

    if (pass == Pass::kForward) {
      Desc q = rows(kQ, H, q_off), kt = rows_t(kK, K, kv_off), v = rows(kV, K, kv_off), o = rows(kO, H, q_off);
      Desc s4 = causal(masked_scores(q, kt));
      Desc m = b.reduction(CUDNN_REDUCE_TENSOR_MAX, s4, b.virt(r_dims, r_strides));
      Desc s5 = b.pointwise(CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, s4, m, b.virt(s_dims, s_strides));
      Desc e = b.pointwise(CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, s5, nullptr, b.virt(s_dims, s_strides));
      Desc z = b.reduction(CUDNN_REDUCE_TENSOR_ADD, e, b.virt(r_dims, r_strides));
      Desc l = b.pointwise(CUDNN_POINTWISE_LOG, CUDNN_DATA_FLOAT, z, nullptr, b.virt(r_dims, r_strides));
      b.pointwise(CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, m, l, stats_like(kStats));
      Desc p = b.pointwise(CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, e, z, b.virt(s_dims, s_strides, io));
      b.matmul(p, v, o, seq_q, nullptr, seq_kv);
    } else {
      Desc q = rows(kQ, H, q_off), kt = rows_t(kK, K, kv_off), vt = rows_t(kV, K, kv_off);
      Desc o = rows(kO, H, q_off), d_o = rows(kDO, H, q_off), dq = rows(kDQ, H, q_off);
      Desc dk = rows(kDK, K, kv_off), dv = rows(kDV, K, kv_off);
      Desc stats = stats_like(kStats);
      Desc one = b.scalar(kOne);
      // softmax_sum = rowsum(dO * O): the softmax backward's correction, per row.
      Desc t1 = b.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, d_o, o,
                            b.virt({B, H, S, D}, {H * S * D, S * D, H * D, 1}));
      Desc t2 = b.reduction(CUDNN_REDUCE_TENSOR_ADD, t1, b.virt(r_dims, r_strides));
      Desc sums = ragged ? stats_like(kSoftmaxSum)
                         : b.tensor({r_dims, r_strides, CUDNN_DATA_FLOAT, false, false, nullptr, kSoftmaxSum});
      Desc softmax_sum = b.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, t2, one, sums);
      Desc s3 = masked_scores(q, kt);
      Desc s4 = b.pointwise(CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, s3, stats, b.virt(s_dims, s_strides));
      Desc s5 = causal(s4);
      Desc p = b.pointwise(CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, s5, nullptr, b.virt(s_dims, s_strides));
      const std::vector<int64_t> t_strides{H * S * S, S * S, 1, S};
      Desc pt = b.reshape(p, b.virt(s_dims, t_strides, io));
      const bool gqa = H != K;
      const std::vector<int64_t> full_dims{B, H, S, D}, full_strides{H * S * D, S * D, D, 1};
      if (gqa) {
        Desc dv_full = b.matmul(pt, d_o, b.virt(full_dims, full_strides, io), seq_kv, nullptr, seq_q);
        b.reduction(CUDNN_REDUCE_TENSOR_ADD, dv_full, dv);
      } else {
        b.matmul(pt, d_o, dv, seq_kv, nullptr, seq_q);
      }
      Desc dp = b.matmul(d_o, vt, b.virt(s_dims, s_strides), seq_q, seq_kv, nullptr);
      Desc x1 = b.pointwise(CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, dp, softmax_sum, b.virt(s_dims, s_strides));
      Desc x2 = b.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, x1, p, b.virt(s_dims, s_strides));
      Desc ds = b.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, x2, scale, b.virt(s_dims, s_strides));
      Desc dst = b.reshape(ds, b.virt(s_dims, t_strides, io));
      if (gqa) {
        Desc dk_full = b.matmul(dst, q, b.virt(full_dims, full_strides, io), seq_kv, nullptr, seq_q);
        b.reduction(CUDNN_REDUCE_TENSOR_ADD, dk_full, dk);
      } else {
        b.matmul(dst, q, dk, seq_kv, nullptr, seq_q);
      }
      Desc kr = b.reshape(kt, b.tensor({{B, K, S, D}, {S * K * D, D, K * D, 1}, io, true, false, kv_off, 0}));
      Desc acc = ragged ? b.tensor({{B, H, S, D}, {S * H * D, D, H * D, 1}, CUDNN_DATA_FLOAT, false, false, q_off,
                                    kDQAccum})
                        : b.tensor({full_dims, full_strides, CUDNN_DATA_FLOAT, false, false, nullptr, kDQAccum});
      b.matmul(ds, kr, acc, seq_q, nullptr, seq_kv);
      b.pointwise(CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT, acc, nullptr, dq);
    }
    plan = b.plan(handle.h);
    check(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, nullptr,
                                   &plan_workspace),
          "plan workspace size");
  }

  // The backward's own scratch ahead of cuDNN's: the fp32 dQ accumulator [tokens, H, D], then the
  // row sums [tokens, H], each with one 128-row tile to spare past the last token (whether cuDNN
  // writes a tile's rows past a document's end is not documented) and rounded up to 256 bytes.
  int64_t accum_bytes(int64_t tokens) const {
    return round_up((tokens + 128) * shape.heads * shape.head_dim * 4, 256);
  }
  int64_t sums_bytes(int64_t tokens) const { return round_up((tokens + 128) * shape.heads * 4, 256); }

  const char* execute(std::vector<int64_t> uids, std::vector<void*> ptrs, void* workspace, void* stream) {
    for (size_t i = uids.size(); i-- > 0;) {  // what this graph lacks: a dense one's layout, the bias
      if (b.binds(uids[i])) continue;
      uids.erase(uids.begin() + static_cast<std::ptrdiff_t>(i));
      ptrs.erase(ptrs.begin() + static_cast<std::ptrdiff_t>(i));
    }
    try {
      check(cudnnSetStream(handle.h, static_cast<cudaStream_t>(stream)), "set stream");
      Builder pack_owner;
      Desc pack = pack_owner.make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
      pack_owner.set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
      pack_owner.set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                     static_cast<int64_t>(ptrs.size()), ptrs.data());
      pack_owner.set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()),
                     uids.data());
      pack_owner.finalize(pack, "variant pack");
      check(cudnnBackendExecute(handle.h, plan, pack), "execute");
    } catch (const std::exception& e) {
      static thread_local std::string message;
      message = e.what();
      return message.c_str();
    }
    return nullptr;
  }
};

SdpaGraph::SdpaGraph(Pass pass, const SdpaShape& shape) : impl_(std::make_unique<Impl>(pass, shape)) {}

SdpaGraph::~SdpaGraph() = default;

const SdpaShape& SdpaGraph::shape() const { return impl_->shape; }
SdpaGraph::Pass SdpaGraph::pass() const { return impl_->pass; }

size_t SdpaGraph::workspace_bytes(int64_t tokens) const {
  int64_t bytes = round_up(impl_->plan_workspace, 256);
  if (impl_->pass == Pass::kBackward) bytes += impl_->accum_bytes(tokens) + impl_->sums_bytes(tokens);
  return static_cast<size_t>(bytes);
}

const char* SdpaGraph::forward(const SdpaLayout& l, const void* q, const void* k, const void* v, void* o,
                               float* stats, float scale, void* workspace, void* stream) {
  float s = scale, ninf = -std::numeric_limits<float>::infinity(), ninf2 = ninf;
  const std::vector<int64_t> uids{kQ,     kK,        kV,         kO,           kStats, kSeqQ, kSeqKV, kQOff,
                                  kKVOff, kStatsOff, kScale, kNegInfPad, kNegInfCausal, kBias};
  const std::vector<void*> ptrs{const_cast<void*>(q), const_cast<void*>(k), const_cast<void*>(v), o, stats,
                                const_cast<int32_t*>(l.seq_len), const_cast<int32_t*>(l.seq_len),
                                const_cast<int64_t*>(l.q_offsets), const_cast<int64_t*>(l.kv_offsets),
                                const_cast<int64_t*>(l.stats_offsets), &s, &ninf, &ninf2, const_cast<void*>(l.bias)};
  return impl_->execute(uids, ptrs, workspace, stream);
}

const char* SdpaGraph::backward(const SdpaLayout& l, const void* q, const void* k, const void* v, const void* o,
                                const void* d_o, const float* stats, void* dq, void* dk, void* dv, float scale,
                                void* workspace, void* stream) {
  float s = scale, ninf = -std::numeric_limits<float>::infinity(), ninf2 = ninf, one = 1.0f;
  char* base = static_cast<char*>(workspace);
  void* accum = base;
  void* sums = base + impl_->accum_bytes(l.tokens);
  void* cudnn_ws = base + impl_->accum_bytes(l.tokens) + impl_->sums_bytes(l.tokens);
  // cuDNN >= 9.6 clears the accumulator itself (cudnn-frontend stopped clearing it there); before,
  // it must be zero when the call starts.
  if (cudnnGetVersion() < 90600 && cudaMemsetAsync(accum, 0, static_cast<size_t>(impl_->accum_bytes(l.tokens)),
                                                   static_cast<cudaStream_t>(stream)) != cudaSuccess)
    return "cudaMemsetAsync of the dQ accumulator failed";
  const std::vector<int64_t> uids{kQ,    kK,    kV,     kO,        kDO,        kStats,        kDQ,
                                  kDK,   kDV,   kSeqQ,  kSeqKV,    kQOff,      kKVOff,        kStatsOff,
                                  kScale, kOne, kNegInfPad, kNegInfCausal, kSoftmaxSum, kDQAccum, kBias};
  const std::vector<void*> ptrs{const_cast<void*>(q),
                                const_cast<void*>(k),
                                const_cast<void*>(v),
                                const_cast<void*>(o),
                                const_cast<void*>(d_o),
                                const_cast<float*>(stats),
                                dq,
                                dk,
                                dv,
                                const_cast<int32_t*>(l.seq_len),
                                const_cast<int32_t*>(l.seq_len),
                                const_cast<int64_t*>(l.q_offsets),
                                const_cast<int64_t*>(l.kv_offsets),
                                const_cast<int64_t*>(l.stats_offsets),
                                &s,
                                &one,
                                &ninf,
                                &ninf2,
                                sums,
                                accum,
                                const_cast<void*>(l.bias)};
  return impl_->execute(uids, ptrs, cudnn_ws, stream);
}

}  // namespace loom::cuda
