// CPU message passing for message="mul": gather-reduce forward over the destination CSR,
// gather-reduce backward over a source-sorted (transposed) copy.  No per-edge scratch in
// memory: each edge's message lives in a B*d buffer that stays in L1.
//
//   m_e[b, k] = x[src_e, b, k] * w[rel_e, b or 0, k] * ew[e, b or 0]     (ew optional)
//   sum[v] = sum_e m_e   sumsq[v] = sum_e m_e^2   max[v] / min[v] with the position of the
//   in-edge attaining it (e - indptr[v]; the first in CSR order), degree[v] = #kept in-edges.
//   Positions are int16 when every in-degree is below 2^15 (half the bytes of int32), else
//   int32.
//
// Backward, for each source s and each kept out-edge e = (s -> v, rel r):
//   gm = g_sum[v] + 2 m_e g_sumsq[v] + [argmax[v] == pos_e] g_max[v] + [argmin[v] == pos_e] g_min[v]
//   d ew[e] = <gm, u_e> (u_e = x[s] * w[r]),  gu = ew[e] gm,
//   d x[s] += gu * w[r] (reduced in registers, written once),  d w[r] += gu * x[s] (per group
//   of source rows: grad_w_groups).
// Without edge weights (the common case) the sum / sumsq part runs as one fused pass and the
// max / min part through per-edge lists of the elements each edge attains and their gradients
// (build_wins), so an edge reads two gradient rows, not six rows of gradients and positions.
//
// Compute is in opmath (float32 for bfloat16 / float16 / float32, float64 for float64).
// Parallel over balanced row ranges with at::parallel_for (torch's OpenMP pool).  Every output
// element is summed in an order that does not depend on the thread count: a row of the forward
// or of d x over its edges in CSR order, d w over fixed groups of rows, then the groups in
// order, so a run gives the same floats with any number of threads.
// Registered as torch.ops.cmpnn_cpu.{forward,backward,norm_param_grads} (the last: layer norm's
// parameter gradients, summed in fixed blocks of rows); no Python headers needed.

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

namespace {

using at::Tensor;

// Split rows [0, n) into `parts` ranges of about equal edge counts (indptr is the CSR).
std::vector<int64_t> balanced(const int64_t* indptr, int64_t n, int64_t parts) {
  std::vector<int64_t> cut(parts + 1, n);
  cut[0] = 0;
  const int64_t total = indptr[n];
  for (int64_t p = 1; p < parts; ++p) {
    const int64_t target = total / parts * p + (total % parts) * p / parts;
    cut[p] = std::lower_bound(indptr, indptr + n + 1, target) - indptr;
    cut[p] = std::max(cut[p - 1], std::min(cut[p], n));
  }
  return cut;
}

// Rows gathered this many edges ahead are prefetched (hides the latency of random rows).
constexpr int64_t kAhead = 4;

inline void prefetch_row(const void* p, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(static_cast<const char*>(p) + o);
}

// Row ranges of an op without a reduction across rows (each output row is one range's).
int64_t num_parts(int64_t n) {
  return std::max<int64_t>(1, std::min<int64_t>(n, 8 * at::get_num_threads()));
}

// Groups of source rows the backward reduces d w over (a private table of `wsize` elements
// each, added up in group order).  Their number depends on the graph and the shapes only,
// never on the thread count: at most kMaxGroups (the backward's parallelism), fewer when a
// table is large next to the edge work `work` (each table costs a fill and an add of wsize
// elements: fb237_v1 with per-query relations, 360 relations and 8,490 edges, gets 2), a
// power of two (an even split over 2, 4, 8 or 16 threads).
constexpr int64_t kMaxGroups = 16;
constexpr int64_t kWorkPerTableElement = 8;

int64_t grad_w_groups(int64_t n, int64_t work, int64_t wsize) {
  const int64_t fit = work / std::max<int64_t>(1, kWorkPerTableElement * wsize);
  int64_t g = 1;
  while (2 * g <= std::min(kMaxGroups, std::min(n, fit))) g *= 2;
  return g;
}

template <typename scalar_t, typename arg_t>
void forward_impl(const Tensor& x, const Tensor& w, const Tensor& ew, const Tensor& mask,
                  const Tensor& indptr, const Tensor& src, const Tensor& rel, bool do_sum,
                  bool do_sq, bool do_max, bool do_min, bool need_arg, Tensor& sum, Tensor& sq,
                  Tensor& mx, Tensor& mn, Tensor& amax, Tensor& amin, Tensor& degree) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t n = x.size(0), nb = x.size(1), d = x.size(2), bd = nb * d;
  const int64_t wb = w.size(1), ewb = ew.defined() ? ew.size(1) : 0;
  const scalar_t* xp = x.const_data_ptr<scalar_t>();
  const scalar_t* wp = w.const_data_ptr<scalar_t>();
  const acc_t* ewp = ew.defined() ? ew.const_data_ptr<acc_t>() : nullptr;
  const bool* mp = mask.defined() ? mask.const_data_ptr<bool>() : nullptr;
  const int64_t* ip = indptr.const_data_ptr<int64_t>();
  const int64_t* sp = src.const_data_ptr<int64_t>();
  const int64_t* rp = rel.const_data_ptr<int64_t>();
  scalar_t* sum_p = do_sum ? sum.data_ptr<scalar_t>() : nullptr;
  scalar_t* sq_p = do_sq ? sq.data_ptr<scalar_t>() : nullptr;
  scalar_t* mx_p = do_max ? mx.data_ptr<scalar_t>() : nullptr;
  scalar_t* mn_p = do_min ? mn.data_ptr<scalar_t>() : nullptr;
  arg_t* amax_p = do_max && need_arg ? amax.data_ptr<arg_t>() : nullptr;
  arg_t* amin_p = do_min && need_arg ? amin.data_ptr<arg_t>() : nullptr;
  scalar_t* deg_p = degree.data_ptr<scalar_t>();
  const auto cut = balanced(ip, n, num_parts(n));
  const int64_t parts = static_cast<int64_t>(cut.size()) - 1;

  at::parallel_for(0, parts, 1, [&](int64_t p0, int64_t p1) {
    std::vector<acc_t> buf(6 * bd);
    acc_t* m = buf.data();
    acc_t* a_sum = m + bd;
    acc_t* a_sq = a_sum + bd;
    acc_t* a_mx = a_sq + bd;
    acc_t* a_mn = a_mx + bd;
    acc_t* wgt = a_mn + bd;  // per-edge weight of each (b, k): broadcast once per edge
    std::vector<arg_t> ibuf(2 * bd);
    arg_t* i_mx = ibuf.data();
    arg_t* i_mn = i_mx + bd;
    const acc_t inf = std::numeric_limits<acc_t>::infinity();
    const int64_t e_end = ip[cut[p1]];
    for (int64_t v = cut[p0]; v < cut[p1]; ++v) {
      std::fill(a_sum, a_sum + 2 * bd, acc_t(0));
      std::fill(a_mx, a_mx + bd, -inf);
      std::fill(a_mn, a_mn + bd, inf);
      std::fill(i_mx, i_mx + 2 * bd, arg_t(-1));
      int64_t kept = 0;
      for (int64_t e = ip[v]; e < ip[v + 1]; ++e) {
        if (e + kAhead < e_end) prefetch_row(xp + sp[e + kAhead] * bd, bd * sizeof(scalar_t));
        if (mp != nullptr && !mp[e]) continue;
        ++kept;
        const scalar_t* xs = xp + sp[e] * bd;
        const scalar_t* wr = wp + rp[e] * wb * d;
        if (wb == 1) {
          for (int64_t b = 0; b < nb; ++b)
            for (int64_t k = 0; k < d; ++k)
              m[b * d + k] = acc_t(xs[b * d + k]) * acc_t(wr[k]);
        } else {
          for (int64_t i = 0; i < bd; ++i) m[i] = acc_t(xs[i]) * acc_t(wr[i]);
        }
        if (ewp != nullptr) {
          const acc_t* we = ewp + e * ewb;
          if (ewb == 1) {
            const acc_t c = we[0];
            for (int64_t i = 0; i < bd; ++i) m[i] *= c;
          } else {
            for (int64_t b = 0; b < nb; ++b)
              for (int64_t k = 0; k < d; ++k) m[b * d + k] *= we[b];
          }
        }
        if (do_sum)
          for (int64_t i = 0; i < bd; ++i) a_sum[i] += m[i];
        if (do_sq)
          for (int64_t i = 0; i < bd; ++i) a_sq[i] += m[i] * m[i];
        const arg_t pos_e = static_cast<arg_t>(e - ip[v]);
        if (do_max)
          for (int64_t i = 0; i < bd; ++i) {
            const bool hit = m[i] > a_mx[i];
            a_mx[i] = hit ? m[i] : a_mx[i];
            i_mx[i] = hit ? pos_e : i_mx[i];
          }
        if (do_min)
          for (int64_t i = 0; i < bd; ++i) {
            const bool hit = m[i] < a_mn[i];
            a_mn[i] = hit ? m[i] : a_mn[i];
            i_mn[i] = hit ? pos_e : i_mn[i];
          }
      }
      const int64_t o = v * bd;
      deg_p[v] = scalar_t(static_cast<acc_t>(kept));
      if (do_sum)
        for (int64_t i = 0; i < bd; ++i) sum_p[o + i] = scalar_t(a_sum[i]);
      if (do_sq)
        for (int64_t i = 0; i < bd; ++i) sq_p[o + i] = scalar_t(a_sq[i]);
      if (do_max) {
        for (int64_t i = 0; i < bd; ++i) mx_p[o + i] = scalar_t(kept ? a_mx[i] : acc_t(0));
        if (amax_p) std::copy(i_mx, i_mx + bd, amax_p + o);
      }
      if (do_min) {
        for (int64_t i = 0; i < bd; ++i) mn_p[o + i] = scalar_t(kept ? a_mn[i] : acc_t(0));
        if (amin_p) std::copy(i_mn, i_mn + bd, amin_p + o);
      }
    }
  });
}

// Returns (sum, sumsq, max, min, argmax, argmin (int16 positions when short_arg, else int32),
// degree); outputs not asked for
// are empty tensors (argmax / argmin too unless need_arg: only the backward reads them).  x [N, B, d], w [R2, 1 or B, d] (x's dtype), ew [E, 1 or B] opmath or
// undefined, mask bool [E] or undefined, indptr [N+1], src / rel [E] int64 (CSR order).
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor> forward(
    const Tensor& x, const Tensor& w, const std::optional<Tensor>& ew,
    const std::optional<Tensor>& mask, const Tensor& indptr, const Tensor& src,
    const Tensor& rel, bool do_sum, bool do_sq, bool do_max, bool do_min, bool need_arg,
    bool short_arg) {
  TORCH_CHECK(x.dim() == 3 && x.is_contiguous() && w.dim() == 3 && w.is_contiguous());
  TORCH_CHECK(w.scalar_type() == x.scalar_type() && w.size(2) == x.size(2));
  TORCH_CHECK(w.size(1) == 1 || w.size(1) == x.size(1));
  TORCH_CHECK(indptr.size(0) == x.size(0) + 1 && src.size(0) == rel.size(0));
  TORCH_CHECK(src.size(0) < std::numeric_limits<int32_t>::max());
  TORCH_CHECK(indptr.scalar_type() == at::kLong && src.scalar_type() == at::kLong &&
              rel.scalar_type() == at::kLong);
  const Tensor ewt = ew.has_value() ? ew->contiguous() : Tensor();
  const Tensor mt = mask.has_value() ? mask->contiguous() : Tensor();
  auto empty = at::empty({0}, x.options());
  Tensor sum = do_sum ? at::empty_like(x) : empty;
  Tensor sq = do_sq ? at::empty_like(x) : empty;
  Tensor mx = do_max ? at::empty_like(x) : empty;
  Tensor mn = do_min ? at::empty_like(x) : empty;
  auto iopt = x.options().dtype(short_arg ? at::kShort : at::kInt);
  Tensor amax = do_max && need_arg ? at::empty(x.sizes(), iopt) : at::empty({0}, iopt);
  Tensor amin = do_min && need_arg ? at::empty(x.sizes(), iopt) : at::empty({0}, iopt);
  Tensor degree = at::empty({x.size(0)}, x.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "cmpnn_fwd", [&] {
    if (short_arg)
      forward_impl<scalar_t, int16_t>(x, w, ewt, mt, indptr.contiguous(), src.contiguous(),
                                      rel.contiguous(), do_sum, do_sq, do_max, do_min,
                                      need_arg, sum, sq, mx, mn, amax, amin, degree);
    else
      forward_impl<scalar_t, int32_t>(x, w, ewt, mt, indptr.contiguous(), src.contiguous(),
                                      rel.contiguous(), do_sum, do_sq, do_max, do_min,
                                      need_arg, sum, sq, mx, mn, amax, amin, degree);
  });
  return {sum, sq, mx, mn, amax, amin, degree};
}

// One kept out-edge (s -> v) without edge weights, the dense part of its gradient in one pass
// over the B*d elements (g in registers, no scratch rows):
//   g = g_sum[v] + 2 x w g_sumsq[v],   gxa += g * w,   gwa += g * x
// (gwa: w's gradient row, [d] summed over b when wb == 1).  The flags are template arguments
// so that the loop has no branch and vectorises.
template <bool GS, bool GQ, typename scalar_t, typename acc_t>
inline void edge_grad(int64_t nb, int64_t d, bool wb1, const acc_t* __restrict__ xf,
                      const scalar_t* __restrict__ wr, const scalar_t* __restrict__ gs,
                      const scalar_t* __restrict__ gq, acc_t* __restrict__ gxa,
                      acc_t* __restrict__ gwa) {
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t ob = b * d;
    const scalar_t* wb = wb1 ? wr : wr + ob;
    acc_t* gw_b = wb1 ? gwa : gwa + ob;
    for (int64_t k = 0; k < d; ++k) {
      const acc_t w = acc_t(wb[k]), x = xf[ob + k];
      acc_t g = 0;
      if constexpr (GS) g += acc_t(gs[ob + k]);
      if constexpr (GQ) g += 2 * x * w * acc_t(gq[ob + k]);
      gxa[ob + k] += g * w;
      gw_b[k] += g * x;
    }
  }
}

template <typename scalar_t, typename acc_t>
using EdgeGrad = void (*)(int64_t, int64_t, bool, const acc_t*, const scalar_t*, const scalar_t*,
                          const scalar_t*, acc_t*, acc_t*);

template <typename scalar_t, typename acc_t>
EdgeGrad<scalar_t, acc_t> pick_edge_grad(bool gs, bool gq) {
  if (gs) return gq ? &edge_grad<true, true, scalar_t, acc_t> : &edge_grad<true, false, scalar_t, acc_t>;
  return gq ? &edge_grad<false, true, scalar_t, acc_t> : &edge_grad<false, false, scalar_t, acc_t>;
}

// max / min backward through per-edge *win lists* (edges without weights).  Element i of
// destination v's max (min) came from in-edge e = indptr[v] + amax[v, i] (amin); the list of
// edge e, wins[ptr[e] .. ptr[e+1]), holds the elements it attains with their gradients,
// (i, g_max[v, i]) or (i, g_min[v, i]).  Built over the destination CSR (the gradient rows read
// in order; each destination's entries inside its own edge range, so no write is shared
// between threads).  The source pass then reads about 2 B d / deg(v) entries per edge instead
// of the g_max, g_min, argmax and argmin rows that a dense blend reads for every edge.
template <typename acc_t>
struct Win {
  uint16_t i, k;  // the element b d + k and its column (B d < 2^16: see kMaxWinRow)
  acc_t g;
};
constexpr int64_t kMaxWinRow = 1 << 16;

// Win lists pay off when edges outnumber destinations: an edge then attains few elements.  At
// a lower mean in-degree the entries (2 B d per destination) cost more than the rows they
// replace, and the dense blend is kept (measured: 95 k nodes, B d = 256: in-degree 10, the
// lists 0.48 s against the blend's 0.33; in-degree 100, 1.9 s against 3.6).
constexpr int64_t kWinMinDegree = 32;

// The lists' memory (ptr int64 [E + 1], then the entries) is kept between calls and grown on
// demand: a fresh mapping of several hundred MB per backward can stall in the kernel's
// huge-page compaction (seen: 0.16 s -> 1.1 s to build the same lists).  A call that finds it
// in use (another thread's backward) allocates its own.
struct WinWorkspace {
  std::mutex lock;
  Tensor bytes;
};
WinWorkspace& win_workspace() {
  static auto* ws = new WinWorkspace;  // never destroyed: no Tensor freed after torch at exit
  return *ws;
}

Tensor workspace_bytes(std::unique_lock<std::mutex>& held, int64_t bytes) {
  auto& ws = win_workspace();
  std::unique_lock<std::mutex> guard(ws.lock, std::try_to_lock);
  if (!guard.owns_lock()) return at::empty({bytes}, at::TensorOptions().dtype(at::kByte));
  if (!ws.bytes.defined() || ws.bytes.numel() < bytes) {
    ws.bytes = Tensor();  // the old block goes before the new one is mapped
    ws.bytes = at::empty({bytes}, at::TensorOptions().dtype(at::kByte));
  }
  held = std::move(guard);
  return ws.bytes;
}

// Returns (ptr [E + 1], entries): views into memory that `held` guards while it is used.
template <typename scalar_t, typename arg_t, typename acc_t>
std::pair<const int64_t*, const Win<acc_t>*> build_wins(
    const int64_t* ip, int64_t n, int64_t d, int64_t bd, const scalar_t* gmx, const arg_t* amx,
    const scalar_t* gmn, const arg_t* amn, std::unique_lock<std::mutex>& held, Tensor& keep) {
  const int64_t num_edges = ip[n];
  const int64_t sides = (amx != nullptr) + (amn != nullptr);
  const int64_t ptr_bytes = (num_edges + 1) * static_cast<int64_t>(sizeof(int64_t));
  // at most one entry per side and (destination, element)
  keep = workspace_bytes(held, ptr_bytes + sides * n * bd * int64_t(sizeof(Win<acc_t>)));
  uint8_t* base = keep.data_ptr<uint8_t>();
  int64_t* ptr = reinterpret_cast<int64_t*>(base);  // the counts, then the offsets
  std::fill(ptr, ptr + num_edges + 1, int64_t(0));
  const auto cut = balanced(ip, n, num_parts(n));
  const int64_t parts = static_cast<int64_t>(cut.size()) - 1;
  at::parallel_for(0, parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t v = cut[p0]; v < cut[p1]; ++v) {
      int64_t* count = ptr + ip[v] + 1;
      for (const arg_t* a : {amx, amn}) {
        if (a == nullptr) continue;
        for (int64_t i = 0; i < bd; ++i) {
          const arg_t pos = a[v * bd + i];
          if (pos >= 0) ++count[pos];
        }
      }
    }
  });
  for (int64_t e = 0; e < num_edges; ++e) ptr[e + 1] += ptr[e];
  auto* wins = reinterpret_cast<Win<acc_t>*>(base + ptr_bytes);
  at::parallel_for(0, parts, 1, [&](int64_t p0, int64_t p1) {
    std::vector<int64_t> next;
    for (int64_t v = cut[p0]; v < cut[p1]; ++v) {
      if (ip[v] == ip[v + 1]) continue;
      next.assign(ptr + ip[v], ptr + ip[v + 1]);
      for (int side = 0; side < 2; ++side) {
        const arg_t* a = side == 0 ? amx : amn;
        const scalar_t* g = side == 0 ? gmx : gmn;
        if (a == nullptr) continue;
        for (int64_t i = 0, k = 0; i < bd; ++i, k = k + 1 == d ? 0 : k + 1) {
          const arg_t pos = a[v * bd + i];
          if (pos >= 0)
            wins[next[pos]++] = {static_cast<uint16_t>(i), static_cast<uint16_t>(k),
                                 acc_t(g[v * bd + i])};
        }
      }
    }
  });
  return {ptr, wins};
}

template <typename scalar_t, typename arg_t>
void backward_impl(const Tensor& x, const Tensor& w, const Tensor& ew, const Tensor& mask,
                   const Tensor& indptr, const Tensor& t_indptr, const Tensor& t_eid, const Tensor& t_dst,
                   const Tensor& t_rel, const Tensor& t_pos, const Tensor& g_sum, const Tensor& g_sq,
                   const Tensor& g_max, const Tensor& g_min, const Tensor& amax,
                   const Tensor& amin, Tensor& gx, Tensor& gw, Tensor& gew) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t n = x.size(0), nb = x.size(1), d = x.size(2), bd = nb * d;
  const int64_t r2 = w.size(0), wb = w.size(1), ewb = ew.defined() ? ew.size(1) : 0;
  const scalar_t* xp = x.const_data_ptr<scalar_t>();
  const scalar_t* wp = w.const_data_ptr<scalar_t>();
  const acc_t* ewp = ew.defined() ? ew.const_data_ptr<acc_t>() : nullptr;
  const bool* mp = mask.defined() ? mask.const_data_ptr<bool>() : nullptr;
  const int64_t* ip = t_indptr.const_data_ptr<int64_t>();
  const int32_t* eid = t_eid.const_data_ptr<int32_t>();
  const int32_t* dstp = t_dst.const_data_ptr<int32_t>();
  const int32_t* relp = t_rel.const_data_ptr<int32_t>();
  const int32_t* posp = t_pos.const_data_ptr<int32_t>();
  const scalar_t* gs = g_sum.defined() ? g_sum.const_data_ptr<scalar_t>() : nullptr;
  const scalar_t* gq = g_sq.defined() ? g_sq.const_data_ptr<scalar_t>() : nullptr;
  const scalar_t* gmx = g_max.defined() ? g_max.const_data_ptr<scalar_t>() : nullptr;
  const scalar_t* gmn = g_min.defined() ? g_min.const_data_ptr<scalar_t>() : nullptr;
  const arg_t* amx = gmx ? amax.const_data_ptr<arg_t>() : nullptr;
  const arg_t* amn = gmn ? amin.const_data_ptr<arg_t>() : nullptr;
  scalar_t* gxp = gx.defined() ? gx.data_ptr<scalar_t>() : nullptr;
  acc_t* gewp = gew.defined() ? gew.data_ptr<acc_t>() : nullptr;
  const bool need_u = gq != nullptr || gewp != nullptr;  // the message itself is needed
  // unweighted edges: max / min through win lists (build_wins), the rest fused (edge_grad)
  const bool sparse = ewp == nullptr && (gmx != nullptr || gmn != nullptr) && bd < kMaxWinRow &&
                      ip[n] >= kWinMinDegree * n;
  const bool fused = ewp == nullptr && (sparse || (gmx == nullptr && gmn == nullptr));
  std::unique_lock<std::mutex> held;  // the win lists' workspace, while this call uses it
  Tensor keep;
  const int64_t* wpp = nullptr;
  const Win<acc_t>* wnp = nullptr;
  if (sparse)
    std::tie(wpp, wnp) = build_wins<scalar_t, arg_t, acc_t>(
        indptr.const_data_ptr<int64_t>(), n, d, bd, gmx, amx, gmn, amn, held, keep);
  const int64_t wsize = r2 * wb * d;
  // d w: one private table per group of rows (grad_w_groups: not the thread count), added up
  // in group order afterwards; without d w, ranges as the forward's
  const auto cut = balanced(ip, n, gw.defined() ? grad_w_groups(n, ip[n] * bd, wsize)
                                                : num_parts(n));
  const int64_t parts = static_cast<int64_t>(cut.size()) - 1;
  std::unique_ptr<acc_t[]> gw_tables(gw.defined() ? new acc_t[parts * wsize] : nullptr);

  at::parallel_for(0, parts, 1, [&](int64_t p0, int64_t p1) {
    std::vector<acc_t> buf(5 * bd);
    acc_t* xf = buf.data();
    acc_t* wf = xf + bd;  // w[r] broadcast to [B, d]
    acc_t* u = wf + bd;
    acc_t* gm = u + bd;
    acc_t* gxa = gm + bd;
    std::vector<acc_t> gw_null(gw.defined() ? 0 : bd);  // w's gradient unused: a sink row
    const auto fast = pick_edge_grad<scalar_t, acc_t>(gs != nullptr, gq != nullptr);
    const int64_t j_end = ip[cut[p1]];
    for (int64_t p = p0; p < p1; ++p) {
      acc_t* gwt = gw_tables ? gw_tables.get() + p * wsize : nullptr;
      if (gwt) std::fill(gwt, gwt + wsize, acc_t(0));
      for (int64_t s = cut[p]; s < cut[p + 1]; ++s) {
        if (ip[s] == ip[s + 1]) {
          if (gxp) std::fill(gxp + s * bd, gxp + (s + 1) * bd, scalar_t(0));
          continue;
        }
        for (int64_t i = 0; i < bd; ++i) xf[i] = acc_t(xp[s * bd + i]);
        std::fill(gxa, gxa + bd, acc_t(0));
        for (int64_t j = ip[s]; j < ip[s + 1]; ++j) {
          if (j + kAhead < j_end) {
            const int64_t ahead = int64_t(dstp[j + kAhead]) * bd;
            if (gs) prefetch_row(gs + ahead, bd * sizeof(scalar_t));
            if (gq) prefetch_row(gq + ahead, bd * sizeof(scalar_t));
            if (sparse) {  // the win list's offsets two steps ahead, its entries one step
              if (j + 2 * kAhead < j_end) __builtin_prefetch(wpp + eid[j + 2 * kAhead]);
              __builtin_prefetch(wnp + wpp[eid[j + kAhead]]);
            } else {
              if (gmx) prefetch_row(gmx + ahead, bd * sizeof(scalar_t));
              if (gmn) prefetch_row(gmn + ahead, bd * sizeof(scalar_t));
              if (amx) prefetch_row(amx + ahead, bd * sizeof(arg_t));
              if (amn) prefetch_row(amn + ahead, bd * sizeof(arg_t));
            }
          }
          const int64_t e = eid[j];
          if (mp != nullptr && !mp[e]) continue;
          const int64_t v = dstp[j], r = relp[j], o = v * bd;
          const scalar_t* wr = wp + r * wb * d;
          const acc_t* we = ewp ? ewp + e * ewb : nullptr;
          if (fused) {  // the common case: one fused pass, then the max / min wins
            acc_t* gwa = gwt ? gwt + r * wb * d : gw_null.data();
            fast(nb, d, wb == 1, xf, wr, gs ? gs + o : nullptr, gq ? gq + o : nullptr, gxa, gwa);
            for (int64_t q = wpp ? wpp[e] : 0, q_end = wpp ? wpp[e + 1] : 0; q < q_end; ++q) {
              const int64_t i = wnp[q].i, k = wb == 1 ? wnp[q].k : i;
              const acc_t g = wnp[q].g;
              gxa[i] += g * acc_t(wr[k]);
              gwa[k] += g * xf[i];
            }
            continue;
          }
          if (wb == 1) {
            for (int64_t b = 0; b < nb; ++b)
              for (int64_t k = 0; k < d; ++k) wf[b * d + k] = acc_t(wr[k]);
          } else {
            for (int64_t i = 0; i < bd; ++i) wf[i] = acc_t(wr[i]);
          }
          if (need_u)
            for (int64_t i = 0; i < bd; ++i) u[i] = xf[i] * wf[i];
          if (gs)
            for (int64_t i = 0; i < bd; ++i) gm[i] = acc_t(gs[o + i]);
          else
            std::fill(gm, gm + bd, acc_t(0));
          if (gq) {  // 2 m g_sumsq, m = ew u
            for (int64_t b = 0; b < nb; ++b) {
              const acc_t c = 2 * (we ? we[ewb == 1 ? 0 : b] : acc_t(1));
              for (int64_t k = 0; k < d; ++k) {
                const int64_t i = b * d + k;
                gm[i] += c * u[i] * acc_t(gq[o + i]);
              }
            }
          }
          const arg_t pos_e = static_cast<arg_t>(posp[j]);
          // the gradient row is loaded whole and blended (a conditional load measured ~10 % slower)
          if (gmx)
            for (int64_t i = 0; i < bd; ++i) {
              const acc_t g = acc_t(gmx[o + i]);
              gm[i] += amx[o + i] == pos_e ? g : acc_t(0);
            }
          if (gmn)
            for (int64_t i = 0; i < bd; ++i) {
              const acc_t g = acc_t(gmn[o + i]);
              gm[i] += amn[o + i] == pos_e ? g : acc_t(0);
            }
          if (we) {
            if (gewp) {
              for (int64_t b = 0; b < nb; ++b) {
                acc_t dot = 0;
                for (int64_t k = 0; k < d; ++k) dot += gm[b * d + k] * u[b * d + k];
                if (ewb == 1)
                  gewp[e] += dot;
                else
                  gewp[e * ewb + b] = dot;
              }
            }
            for (int64_t b = 0; b < nb; ++b) {
              const acc_t c = we[ewb == 1 ? 0 : b];
              for (int64_t k = 0; k < d; ++k) gm[b * d + k] *= c;
            }
          }
          if (gxp)
            for (int64_t i = 0; i < bd; ++i) gxa[i] += gm[i] * wf[i];
          if (gwt) {
            acc_t* g = gwt + r * wb * d;
            if (wb == 1) {
              for (int64_t b = 0; b < nb; ++b)
                for (int64_t k = 0; k < d; ++k) g[k] += gm[b * d + k] * xf[b * d + k];
            } else {
              for (int64_t i = 0; i < bd; ++i) g[i] += gm[i] * xf[i];
            }
          }
        }
        if (gxp)
          for (int64_t i = 0; i < bd; ++i) gxp[s * bd + i] = scalar_t(gxa[i]);
      }
    }
  });
  if (gw.defined()) {  // element by element, the groups' tables in group order
    scalar_t* gwp = gw.data_ptr<scalar_t>();
    const acc_t* tables = gw_tables.get();
    at::parallel_for(0, wsize, 1 << 14, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        acc_t total = tables[i];
        for (int64_t p = 1; p < parts; ++p) total += tables[p * wsize + i];
        gwp[i] = scalar_t(total);
      }
    });
  }
}

// Returns (grad x, grad w, grad ew [E, 1 or B] opmath); each empty unless asked for.  The
// transposed graph: t_indptr [N+1] by source, t_eid / t_dst / t_rel / t_pos (position among
// the destination's in-edges) int32 [E] in source order.
std::tuple<Tensor, Tensor, Tensor> backward(
    const Tensor& x, const Tensor& w, const std::optional<Tensor>& ew,
    const std::optional<Tensor>& mask, const Tensor& indptr, const Tensor& t_indptr,
    const Tensor& t_eid,
    const Tensor& t_dst, const Tensor& t_rel, const Tensor& t_pos,
    const std::optional<Tensor>& g_sum,
    const std::optional<Tensor>& g_sq, const std::optional<Tensor>& g_max,
    const std::optional<Tensor>& g_min, const Tensor& amax, const Tensor& amin, bool need_x,
    bool need_w, bool need_ew) {
  TORCH_CHECK(x.dim() == 3 && x.is_contiguous() && w.is_contiguous());
  TORCH_CHECK(t_indptr.size(0) == x.size(0) + 1 && indptr.size(0) == x.size(0) + 1);
  auto opt = [](const std::optional<Tensor>& t) {
    return t.has_value() ? t->contiguous() : Tensor();
  };
  const Tensor ewt = opt(ew), mt = opt(mask);
  const Tensor gs = opt(g_sum), gq = opt(g_sq), gmx = opt(g_max), gmn = opt(g_min);
  for (const Tensor* g : {&gs, &gq, &gmx, &gmn})
    TORCH_CHECK(!g->defined() || (g->sizes() == x.sizes() && g->scalar_type() == x.scalar_type()));
  Tensor gx = need_x ? at::empty_like(x) : Tensor();
  Tensor gw = need_w ? at::empty_like(w) : Tensor();
  Tensor gew = need_ew && ewt.defined() ? at::zeros_like(ewt) : Tensor();
  const bool short_arg = (gmx.defined() ? amax : amin).scalar_type() == at::kShort;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "cmpnn_bwd", [&] {
    if (short_arg)
      backward_impl<scalar_t, int16_t>(x, w, ewt, mt, indptr.contiguous(), t_indptr.contiguous(),
                                       t_eid.contiguous(),
                                       t_dst.contiguous(), t_rel.contiguous(),
                                       t_pos.contiguous(), gs, gq, gmx, gmn, amax.contiguous(),
                                       amin.contiguous(), gx, gw, gew);
    else
      backward_impl<scalar_t, int32_t>(x, w, ewt, mt, indptr.contiguous(), t_indptr.contiguous(),
                                       t_eid.contiguous(),
                                       t_dst.contiguous(), t_rel.contiguous(),
                                       t_pos.contiguous(), gs, gq, gmx, gmn, amax.contiguous(),
                                       amin.contiguous(), gx, gw, gew);
  });
  auto none = at::empty({0}, x.options());
  return {need_x ? gx : none, need_w ? gw : none, gew.defined() ? gew : none};
}

// Layer norm's parameter gradients over the rows of dy, x [M, d] (contiguous; mu, rstd [M]):
//   d gamma[k] = sum_i dy[i, k] (x[i, k] - mu[i]) rstd[i],   d beta[k] = sum_i dy[i, k],
// each summed over kNormBlocks fixed blocks of consecutive rows (rows in order inside a block),
// then the blocks in order: the same floats for any thread count, in one pass over dy and x.
constexpr int64_t kNormBlocks = 64;

std::tuple<Tensor, Tensor> norm_param_grads(const Tensor& dy, const Tensor& x, const Tensor& mu,
                                            const Tensor& rstd) {
  TORCH_CHECK(dy.dim() == 2 && dy.sizes() == x.sizes() && dy.is_contiguous() && x.is_contiguous());
  TORCH_CHECK(mu.numel() == x.size(0) && rstd.numel() == x.size(0));
  const int64_t m = x.size(0), d = x.size(1);
  Tensor gg = at::empty({d}, x.options()), gb = at::empty({d}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "cmpnn_norm_grads", [&] {
    const scalar_t* dyp = dy.const_data_ptr<scalar_t>();
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const Tensor mut = mu.contiguous().to(x.scalar_type()), rst = rstd.contiguous().to(x.scalar_type());
    const scalar_t* mup = mut.const_data_ptr<scalar_t>();
    const scalar_t* rp = rst.const_data_ptr<scalar_t>();
    const int64_t blocks = std::max<int64_t>(1, std::min(m, kNormBlocks));
    std::vector<scalar_t> part(2 * blocks * d);
    at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        scalar_t* pg = part.data() + 2 * b * d;
        scalar_t* pb = pg + d;
        std::fill(pg, pg + 2 * d, scalar_t(0));
        for (int64_t i = m * b / blocks; i < m * (b + 1) / blocks; ++i) {
          const scalar_t* g = dyp + i * d;
          const scalar_t* xi = xp + i * d;
          const scalar_t mi = mup[i], ri = rp[i];
          for (int64_t k = 0; k < d; ++k) {
            pg[k] += g[k] * ((xi[k] - mi) * ri);
            pb[k] += g[k];
          }
        }
      }
    });
    scalar_t* ggp = gg.data_ptr<scalar_t>();
    scalar_t* gbp = gb.data_ptr<scalar_t>();
    for (int64_t k = 0; k < d; ++k) {
      scalar_t sg = 0, sb = 0;
      for (int64_t b = 0; b < blocks; ++b) {
        sg += part[2 * b * d + k];
        sb += part[2 * b * d + d + k];
      }
      ggp[k] = sg;
      gbp[k] = sb;
    }
  });
  return {gg, gb};
}

}  // namespace

TORCH_LIBRARY(cmpnn_cpu, m) {
  m.def(
      "forward(Tensor x, Tensor w, Tensor? ew, Tensor? mask, Tensor indptr, Tensor src, "
      "Tensor rel, bool do_sum, bool do_sq, bool do_max, bool do_min, bool need_arg, "
      "bool short_arg) -> "
      "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def(
      "backward(Tensor x, Tensor w, Tensor? ew, Tensor? mask, Tensor indptr, Tensor t_indptr, "
      "Tensor t_eid, "
      "Tensor t_dst, Tensor t_rel, Tensor t_pos, Tensor? g_sum, Tensor? g_sq, Tensor? g_max, Tensor? g_min, "
      "Tensor amax, Tensor amin, bool need_x, bool need_w, bool need_ew) -> "
      "(Tensor, Tensor, Tensor)");
  m.def("norm_param_grads(Tensor dy, Tensor x, Tensor mu, Tensor rstd) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(cmpnn_cpu, CPU, m) {
  m.impl("forward", &forward);
  m.impl("backward", &backward);
  m.impl("norm_param_grads", &norm_param_grads);
}
