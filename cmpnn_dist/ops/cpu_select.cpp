// CPU selection and packing for pruned propagation (cmpnn_dist/model/pruned.py): the top
// senders of every query, the top out-edges of those senders and the packed graph they form,
// with no sort of the candidates.  Both ops keep exactly the items the torch path keeps:
//
//   top-k of a query's items by score (descending); ties: the item that comes first in the
//   input order.  The k-th score t is found with a 65,536-bucket histogram of the scores'
//   order-preserving bits (for the edges filled while their scores are read) and
//   nth_element over the one bucket that holds t; then one ordered pass keeps every
//   score > t and the first (k - #greater) items with score == t (for the edges without a
//   branch on the outcome: every candidate is written, the kept ones advance the output).
//
// senders(keys [M], score [M], n, batch, k) -> sorted int64 keys of the kept (query, node)
//   pairs: per query b (= key / n) its top-k rows (rows in input order).
// subgraph(s_keys [S] sorted, n, batch, out_ptr [N+1], out_edge / out_dst / out_rel [E],
//   mask bool [E]? (in out_ptr order: the edge at out position p is kept when mask[p]; read
//   sequentially), slot [B N] int32 or int64 (row or -1), score [M], const_score [B], e,
//   num_relations, with_edges) -> the candidates: every out-edge of every sender (kept by
//   mask), grouped by sender in input order, then by out_ptr order, the receiver scored by
//   score[slot[r_key]] (or const_score[b] when unvisited); the top-e per query are packed:
//     node_keys int64 [P]   sorted keys of the senders and the receivers (the packed rows)
//     s_rows int64 [S]      the row of each sender
//     indptr [P+1], src [C], rel [C] (int64): the receiver-sorted packed graph (a counting
//                           sort, stable: within a row, edges in candidate order); rel is
//                           b * num_relations + r
//     edge int64 [C]        the graph's edge id of each packed edge (empty unless with_edges)
//     t_indptr int64 [P+1], t_edge, t_dst, t_rel, t_pos int32 [C]: the source-sorted view
//                           that ops/cpu.py's transposed() would build by a sort (candidate
//                           order is already by sender row); t_pos: the position of the edge
//                           among its receiver's in-edges
// Parallel over queries (at::parallel_for); registered as torch.ops.cmpnn_cpu.select_*.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <cstdint>
#include <functional>
#include <optional>
#include <tuple>
#include <vector>

namespace {

using at::Tensor;

// Larger score -> larger key (IEEE bits made monotone; -0 folded into +0).
inline uint32_t order_key(float s) {
  s += 0.0f;
  uint32_t u;
  std::memcpy(&u, &s, sizeof u);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The top-k of c > k scores as a cut: keep s > t, and the first `ties` items with s == t.
// `hist`: counts of order_key(s) >> 16 (65,536 buckets); only the threshold's bucket is
// searched with nth_element.
struct Cut {
  float t;
  int64_t ties;
};

Cut top_k_cut(const float* s, int64_t c, int64_t k, const std::vector<uint32_t>& hist) {
  int64_t above = 0;
  int64_t bucket = static_cast<int64_t>(hist.size()) - 1;
  for (; bucket > 0 && above + hist[bucket] < k; --bucket) above += hist[bucket];
  std::vector<float> in;
  in.reserve(hist[bucket]);
  for (int64_t i = 0; i < c; ++i)
    if (static_cast<int64_t>(order_key(s[i]) >> 16) == bucket) in.push_back(s[i]);
  const int64_t need = k - above;  // in [1, in.size()]
  std::nth_element(in.begin(), in.begin() + (need - 1), in.end(), std::greater<float>());
  const float t = in[need - 1];
  int64_t greater = above;
  for (float x : in) greater += x > t;
  return {t, k - greater};
}

// Bool keep-mask of the top-k of `score` (descending; ties: smaller index first).
std::vector<char> top_k_mask(const std::vector<float>& score, int64_t k) {
  const int64_t c = static_cast<int64_t>(score.size());
  std::vector<char> keep(c, 1);
  if (c <= k) return keep;
  std::vector<uint32_t> hist(65536, 0u);
  for (float x : score) ++hist[order_key(x) >> 16];
  const Cut cut = top_k_cut(score.data(), c, k, hist);
  int64_t ties = cut.ties;
  for (int64_t i = 0; i < c; ++i) {
    const float x = score[i];
    keep[i] = x > cut.t || (x == cut.t && ties-- > 0);
  }
  return keep;
}

Tensor select_senders(const Tensor& keys, const Tensor& score, int64_t n, int64_t batch,
                      int64_t k) {
  TORCH_CHECK(keys.scalar_type() == at::kLong && score.scalar_type() == at::kFloat);
  TORCH_CHECK(keys.numel() == score.numel());
  const Tensor kc = keys.contiguous(), sc = score.contiguous();
  const int64_t* kp = kc.const_data_ptr<int64_t>();
  const float* sp = sc.const_data_ptr<float>();
  const int64_t m = kc.numel();
  std::vector<std::vector<int64_t>> rows(batch);
  for (int64_t i = 0; i < m; ++i) rows[kp[i] / n].push_back(i);
  std::vector<std::vector<int64_t>> out(batch);
  at::parallel_for(0, batch, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      std::vector<float> s(rows[b].size());
      for (size_t j = 0; j < s.size(); ++j) s[j] = sp[rows[b][j]];
      const auto keep = top_k_mask(s, k);
      for (size_t j = 0; j < s.size(); ++j)
        if (keep[j]) out[b].push_back(kp[rows[b][j]]);
      std::sort(out[b].begin(), out[b].end());
    }
  });
  int64_t total = 0;
  for (const auto& o : out) total += static_cast<int64_t>(o.size());
  Tensor result = at::empty({total}, kc.options());
  int64_t* rp = result.data_ptr<int64_t>();
  for (const auto& o : out) rp = std::copy(o.begin(), o.end(), rp);
  return result;
}

using Subgraph = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor,
                            Tensor, Tensor, Tensor>;

// One query's part of a layer's subgraph: its kept edges in output order (each one's sender
// as its index among the query's senders, receiver node, relation, and out position when edge
// ids are asked for), and its nodes (sorted) with their in-degrees in the subgraph.
struct QueryPart {
  std::vector<int32_t> sender, receiver, rel;  // sender: its index in the query's senders
  std::vector<int64_t> pos, node;               // pos: only with_edges
  std::vector<int32_t> degree;
};

template <typename slot_t>
Subgraph subgraph_impl(const Tensor& s_keys, int64_t n, int64_t batch, const Tensor& out_ptr,
                       const Tensor& out_edge, const Tensor& out_dst, const Tensor& out_rel,
                       const Tensor& mask, const Tensor& slot, const Tensor& score,
                       const Tensor& const_score, int64_t e, int64_t num_relations,
                       bool with_edges) {
  const int64_t* sk = s_keys.const_data_ptr<int64_t>();
  const int64_t* ptr = out_ptr.const_data_ptr<int64_t>();
  const int64_t* oe = out_edge.const_data_ptr<int64_t>();
  const int64_t* od = out_dst.const_data_ptr<int64_t>();
  const int64_t* orl = out_rel.const_data_ptr<int64_t>();
  const bool* mp = mask.defined() ? mask.const_data_ptr<bool>() : nullptr;
  const slot_t* sl = slot.const_data_ptr<slot_t>();
  const float* sp = score.const_data_ptr<float>();
  const float* cp = const_score.const_data_ptr<float>();
  const int64_t s_count = s_keys.numel();
  // senders of query b: [first[b], first[b + 1]) (s_keys is sorted, so b-major)
  std::vector<int64_t> first(batch + 1);
  for (int64_t b = 0; b <= batch; ++b)
    first[b] = std::lower_bound(sk, sk + s_count, b * n) - sk;
  // f(i, p) for every out-edge of query b's senders kept by the mask: sender row i, out
  // position p; senders in input order, then out_ptr order
  auto each_edge = [&](int64_t b, auto&& f) {
    for (int64_t i = first[b]; i < first[b + 1]; ++i) {
      const int64_t v = sk[i] - b * n;
      for (int64_t p = ptr[v]; p < ptr[v + 1]; ++p)
        if (mp == nullptr || mp[p]) f(i, p);
    }
  };
  std::vector<QueryPart> part(batch);
  at::parallel_for(0, batch, 1, [&](int64_t b0, int64_t b1) {
    std::vector<uint32_t> hist(65536);
    std::vector<float> node_score(n), s;
    std::vector<int32_t> degree(n, -1);  // -1: not in the subgraph
    std::vector<int64_t> touched, kp;
    std::vector<int32_t> ks, kr, kl;
    for (int64_t b = b0; b < b1; ++b) {
      QueryPart& q = part[b];
      int64_t bound = 0;  // every out-edge of the senders (the mask only removes some)
      for (int64_t i = first[b]; i < first[b + 1]; ++i) {
        const int64_t v = sk[i] - b * n;
        bound += ptr[v + 1] - ptr[v];
      }
      // 1. the cut of the top e candidates by their receiver's score (when over e)
      bool cutting = false;
      Cut cut{0.0f, 0};
      if (bound > e) {
        const slot_t* slot_b = sl + b * n;
        const float const_b = cp[b];
        for (int64_t v = 0; v < n; ++v) {  // one lookup per candidate, not slot then score
          const int64_t row = static_cast<int64_t>(slot_b[v]);
          node_score[v] = row >= 0 ? sp[row] : const_b;
        }
        s.resize(bound);
        std::fill(hist.begin(), hist.end(), 0u);
        int64_t c = 0;
        each_edge(b, [&](int64_t, int64_t p) {
          const float x = node_score[od[p]];
          s[c++] = x;
          ++hist[order_key(x) >> 16];
        });
        if (c > e) {
          cut = top_k_cut(s.data(), c, e, hist);
          cutting = true;
        }
      }
      // 2. the kept edges, and the nodes they touch with their in-degrees
      touched.clear();
      auto touch = [&](int64_t v) {
        if (degree[v] < 0) {
          degree[v] = 0;
          touched.push_back(v);
        }
      };
      for (int64_t i = first[b]; i < first[b + 1]; ++i) touch(sk[i] - b * n);
      // every candidate written, the index advanced only for a kept one (no branch to
      // mispredict on the cut); then the kept prefix is copied out and its nodes touched
      ks.resize(bound);
      kr.resize(bound);
      kl.resize(bound);
      if (with_edges) kp.resize(bound);
      int64_t w = 0, j = 0, ties = cutting ? cut.ties : 0;
      const float t = cut.t;
      each_edge(b, [&](int64_t i, int64_t p) {
        bool keep = true;
        if (cutting) {  // keep the scores above t, then the first `ties` at t
          const float x = s[j++];
          const bool at_t = x == t;
          keep = (x > t) | (at_t & (ties > 0));
          ties -= at_t & keep;
        }
        ks[w] = static_cast<int32_t>(i - first[b]);
        kr[w] = static_cast<int32_t>(od[p]);
        kl[w] = static_cast<int32_t>(orl[p]);
        if (with_edges) kp[w] = p;
        w += keep;
      });
      q.sender.assign(ks.begin(), ks.begin() + w);
      q.receiver.assign(kr.begin(), kr.begin() + w);
      q.rel.assign(kl.begin(), kl.begin() + w);
      if (with_edges) q.pos.assign(kp.begin(), kp.begin() + w);
      for (int64_t c = 0; c < w; ++c) {
        touch(kr[c]);
        ++degree[kr[c]];
      }
      if (static_cast<int64_t>(touched.size()) * 16 > n) {  // in order: scan, not sort
        touched.clear();
        for (int64_t v = 0; v < n; ++v)
          if (degree[v] >= 0) touched.push_back(v);
      } else {
        std::sort(touched.begin(), touched.end());
      }
      q.node = touched;
      q.degree.resize(touched.size());
      for (size_t r = 0; r < touched.size(); ++r) {
        q.degree[r] = degree[touched[r]];
        degree[touched[r]] = -1;
      }
    }
  });
  // offsets of every query's nodes and edges in the packed graph
  std::vector<int64_t> node_off(batch + 1, 0), edge_off(batch + 1, 0);
  for (int64_t b = 0; b < batch; ++b) {
    node_off[b + 1] = node_off[b] + static_cast<int64_t>(part[b].node.size());
    edge_off[b + 1] = edge_off[b] + static_cast<int64_t>(part[b].sender.size());
  }
  const int64_t num = node_off[batch], total = edge_off[batch];
  TORCH_CHECK(total < INT32_MAX && batch * num_relations < INT32_MAX,
              "select_subgraph: the packed graph's edge and relation ids must fit int32");
  auto opt = s_keys.options();
  Tensor node_keys = at::empty({num}, opt), s_rows = at::empty({s_count}, opt);
  Tensor indptr = at::empty({num + 1}, opt), src = at::empty({total}, opt);
  Tensor rel = at::empty({total}, opt), edge = at::empty({with_edges ? total : 0}, opt);
  // the source-sorted view (ops/cpu.py's transposed): step 2's order is already by sender row
  const auto opt32 = opt.dtype(at::kInt);
  Tensor t_indptr = at::zeros({num + 1}, opt), t_edge = at::empty({total}, opt32);
  Tensor t_dst = at::empty({total}, opt32), t_rel = at::empty({total}, opt32);
  Tensor t_pos = at::empty({total}, opt32);
  int64_t* nk = node_keys.data_ptr<int64_t>();
  int64_t* sr = s_rows.data_ptr<int64_t>();
  int64_t* ip = indptr.data_ptr<int64_t>();
  int64_t* src_p = src.data_ptr<int64_t>();
  int64_t* rel_p = rel.data_ptr<int64_t>();
  int64_t* edge_p = with_edges ? edge.data_ptr<int64_t>() : nullptr;
  int64_t* tip = t_indptr.data_ptr<int64_t>();
  int32_t* te = t_edge.data_ptr<int32_t>();
  int32_t* td = t_dst.data_ptr<int32_t>();
  int32_t* tr = t_rel.data_ptr<int32_t>();
  int32_t* tp = t_pos.data_ptr<int32_t>();
  ip[0] = 0;
  // 3. per query: node keys, row offsets, and the edges counting-sorted by receiver row
  // (stable: within a row, edges keep the order of step 2)
  at::parallel_for(0, batch, 1, [&](int64_t b0, int64_t b1) {
    std::vector<int32_t> local(n);  // a node's row among its query's packed rows
    std::vector<int64_t> cursor, start;
    for (int64_t b = b0; b < b1; ++b) {
      const QueryPart& q = part[b];
      const int64_t p0 = node_off[b];
      cursor.resize(q.node.size());
      start.resize(q.node.size());
      int64_t at = edge_off[b];
      for (size_t r = 0; r < q.node.size(); ++r) {
        local[q.node[r]] = static_cast<int32_t>(r);
        nk[p0 + r] = b * n + q.node[r];
        cursor[r] = start[r] = at;
        at += q.degree[r];
        ip[p0 + r + 1] = at;
      }
      const int64_t* senders = sk + first[b];
      int64_t* sender_rows = sr + first[b];
      for (int64_t i = 0; i < first[b + 1] - first[b]; ++i)
        sender_rows[i] = p0 + local[senders[i] - b * n];
      const int64_t rel_base = b * num_relations;
      for (size_t c = 0; c < q.sender.size(); ++c) {
        const int64_t lr = local[q.receiver[c]], sender = sender_rows[q.sender[c]];
        const int64_t w = cursor[lr]++, t = edge_off[b] + static_cast<int64_t>(c);
        const int64_t rel_w = rel_base + q.rel[c];
        src_p[w] = sender;
        rel_p[w] = rel_w;
        if (edge_p != nullptr) edge_p[w] = oe[q.pos[c]];
        ++tip[sender + 1];
        te[t] = static_cast<int32_t>(w);
        td[t] = static_cast<int32_t>(p0 + lr);
        tr[t] = static_cast<int32_t>(rel_w);
        tp[t] = static_cast<int32_t>(w - start[lr]);
      }
    }
  });
  for (int64_t r = 0; r < num; ++r) tip[r + 1] += tip[r];
  return {node_keys, s_rows, indptr, src, rel, edge, t_indptr, t_edge, t_dst, t_rel, t_pos};
}

Subgraph select_subgraph(const Tensor& s_keys, int64_t n, int64_t batch, const Tensor& out_ptr,
                         const Tensor& out_edge, const Tensor& out_dst, const Tensor& out_rel,
                         const std::optional<Tensor>& mask, const Tensor& slot,
                         const Tensor& score, const Tensor& const_score, int64_t e,
                         int64_t num_relations, bool with_edges) {
  for (const Tensor* t : {&s_keys, &out_ptr, &out_edge, &out_dst, &out_rel})
    TORCH_CHECK(t->scalar_type() == at::kLong && t->is_contiguous(), "int64 contiguous index");
  TORCH_CHECK(score.scalar_type() == at::kFloat && const_score.scalar_type() == at::kFloat);
  TORCH_CHECK(score.is_contiguous() && const_score.is_contiguous() && slot.is_contiguous());
  TORCH_CHECK(slot.numel() == batch * n && const_score.numel() == batch && e >= 0);
  TORCH_CHECK(out_ptr.numel() == n + 1);
  TORCH_CHECK(n < INT32_MAX, "select_subgraph: node ids must fit int32");
  const Tensor mt = mask.has_value() ? mask->contiguous() : Tensor();
  TORCH_CHECK(!mt.defined() || (mt.scalar_type() == at::kBool && mt.numel() == out_edge.numel()));
  if (slot.scalar_type() == at::kInt)
    return subgraph_impl<int32_t>(s_keys, n, batch, out_ptr, out_edge, out_dst, out_rel, mt,
                                  slot, score, const_score, e, num_relations, with_edges);
  TORCH_CHECK(slot.scalar_type() == at::kLong, "slot: int32 or int64");
  return subgraph_impl<int64_t>(s_keys, n, batch, out_ptr, out_edge, out_dst, out_rel, mt, slot,
                                score, const_score, e, num_relations, with_edges);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(cmpnn_cpu, m) {
  m.def("select_senders(Tensor keys, Tensor score, int n, int batch, int k) -> Tensor");
  m.def(
      "select_subgraph(Tensor s_keys, int n, int batch, Tensor out_ptr, Tensor out_edge, "
      "Tensor out_dst, Tensor out_rel, Tensor? mask, Tensor slot, Tensor score, "
      "Tensor const_score, int e, int num_relations, bool with_edges) -> "
      "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(cmpnn_cpu, CPU, m) {
  m.impl("select_senders", &select_senders);
  m.impl("select_subgraph", &select_subgraph);
}
