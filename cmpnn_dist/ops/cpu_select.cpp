// CPU selection for pruned propagation (cmpnn_dist/model/pruned_select.py): the top senders
// of every query and the top out-edges of those senders, in one pass per query with no sort
// of the candidates.  Both ops keep exactly the items the torch path keeps:
//
//   top-k of a query's items by score (descending); ties: the item that comes first in the
//   input order.  Found with one nth_element for the k-th score t, then one ordered pass that
//   keeps every score > t and the first (k - #greater) items with score == t.
//
// senders(keys [M], score [M], n, batch, k) -> sorted int64 keys of the kept (query, node)
//   pairs: per query b (= key / n) its top-k rows (rows in input order).
// out_edges(s_keys [S] sorted, n, batch, out_ptr [N+1], out_edge / out_dst / out_rel [E],
//   mask bool [E]? (in out_ptr order: the edge at out position p is kept when mask[p]; read
//   sequentially), slot [B N] int32 or int64 (row or -1), score [M], const_score [B], e,
//   num_relations) -> (owner, edge, query, r_key, rel) int64 [C]: every out-edge of every
//   sender (kept by mask), the receiver scored by score[slot[r_key]] (or const_score[b] when
//   unvisited), the top-e per query; grouped by sender in input order, then by out_ptr order.
// Parallel over queries (at::parallel_for); registered as torch.ops.cmpnn_cpu.select_*.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <tuple>
#include <vector>

namespace {

using at::Tensor;

// Bool keep-mask of the top-k of `score` (descending; ties: smaller index first).
std::vector<char> top_k_mask(const std::vector<float>& score, int64_t k) {
  const int64_t c = static_cast<int64_t>(score.size());
  std::vector<char> keep(c, 1);
  if (c <= k) return keep;
  std::vector<float> tmp(score);
  std::nth_element(tmp.begin(), tmp.begin() + (k - 1), tmp.end(), std::greater<float>());
  const float t = tmp[k - 1];
  int64_t greater = 0;
  for (float s : score) greater += s > t;
  int64_t ties = k - greater;
  for (int64_t i = 0; i < c; ++i) {
    const float s = score[i];
    keep[i] = s > t || (s == t && ties-- > 0);
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

template <typename slot_t>
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> out_edges_impl(
    const Tensor& s_keys, int64_t n, int64_t batch, const Tensor& out_ptr,
    const Tensor& out_edge, const Tensor& out_dst, const Tensor& out_rel, const Tensor& mask,
    const Tensor& slot, const Tensor& score, const Tensor& const_score, int64_t e,
    int64_t num_relations) {
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
  // kept candidates of each query: (owner, out position)
  std::vector<std::vector<int64_t>> own(batch), pos(batch);
  at::parallel_for(0, batch, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      std::vector<int64_t>& ow = own[b];
      std::vector<int64_t>& ps = pos[b];
      std::vector<float> s;
      int64_t bound = 0;  // every out-edge of the senders (the mask only removes some)
      for (int64_t i = first[b]; i < first[b + 1]; ++i) {
        const int64_t v = sk[i] - b * n;
        bound += ptr[v + 1] - ptr[v];
      }
      ow.reserve(bound);
      ps.reserve(bound);
      s.reserve(bound);
      for (int64_t i = first[b]; i < first[b + 1]; ++i) {
        const int64_t v = sk[i] - b * n;
        for (int64_t p = ptr[v]; p < ptr[v + 1]; ++p) {
          if (mp != nullptr && !mp[p]) continue;
          const int64_t row = static_cast<int64_t>(sl[b * n + od[p]]);
          ow.push_back(i);
          ps.push_back(p);
          s.push_back(row >= 0 ? sp[row] : cp[b]);
        }
      }
      if (static_cast<int64_t>(s.size()) <= e) continue;
      const auto keep = top_k_mask(s, e);
      size_t w = 0;
      for (size_t j = 0; j < s.size(); ++j)
        if (keep[j]) {
          ow[w] = ow[j];
          ps[w] = ps[j];
          ++w;
        }
      ow.resize(w);
      ps.resize(w);
    }
  });
  int64_t total = 0;
  for (const auto& o : own) total += static_cast<int64_t>(o.size());
  auto opt = s_keys.options();
  Tensor owner = at::empty({total}, opt), edge = at::empty({total}, opt);
  Tensor query = at::empty({total}, opt), r_key = at::empty({total}, opt);
  Tensor rel = at::empty({total}, opt);
  int64_t* o_p = owner.data_ptr<int64_t>();
  int64_t* e_p = edge.data_ptr<int64_t>();
  int64_t* q_p = query.data_ptr<int64_t>();
  int64_t* k_p = r_key.data_ptr<int64_t>();
  int64_t* r_p = rel.data_ptr<int64_t>();
  std::vector<int64_t> offset(batch + 1, 0);
  for (int64_t b = 0; b < batch; ++b)
    offset[b + 1] = offset[b] + static_cast<int64_t>(own[b].size());
  at::parallel_for(0, batch, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      for (size_t j = 0; j < own[b].size(); ++j) {
        const int64_t c = offset[b] + static_cast<int64_t>(j), p = pos[b][j];
        o_p[c] = own[b][j];
        e_p[c] = oe[p];
        q_p[c] = b;
        k_p[c] = b * n + od[p];
        r_p[c] = b * num_relations + orl[p];
      }
    }
  });
  return {owner, edge, query, r_key, rel};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> select_out_edges(
    const Tensor& s_keys, int64_t n, int64_t batch, const Tensor& out_ptr,
    const Tensor& out_edge, const Tensor& out_dst, const Tensor& out_rel,
    const std::optional<Tensor>& mask, const Tensor& slot, const Tensor& score,
    const Tensor& const_score, int64_t e, int64_t num_relations) {
  for (const Tensor* t : {&s_keys, &out_ptr, &out_edge, &out_dst, &out_rel})
    TORCH_CHECK(t->scalar_type() == at::kLong && t->is_contiguous(), "int64 contiguous index");
  TORCH_CHECK(score.scalar_type() == at::kFloat && const_score.scalar_type() == at::kFloat);
  TORCH_CHECK(score.is_contiguous() && const_score.is_contiguous() && slot.is_contiguous());
  TORCH_CHECK(slot.numel() == batch * n && const_score.numel() == batch && e >= 0);
  TORCH_CHECK(out_ptr.numel() == n + 1);
  const Tensor mt = mask.has_value() ? mask->contiguous() : Tensor();
  TORCH_CHECK(!mt.defined() || (mt.scalar_type() == at::kBool && mt.numel() == out_edge.numel()));
  if (slot.scalar_type() == at::kInt)
    return out_edges_impl<int32_t>(s_keys, n, batch, out_ptr, out_edge, out_dst, out_rel, mt,
                                   slot, score, const_score, e, num_relations);
  TORCH_CHECK(slot.scalar_type() == at::kLong, "slot: int32 or int64");
  return out_edges_impl<int64_t>(s_keys, n, batch, out_ptr, out_edge, out_dst, out_rel, mt,
                                 slot, score, const_score, e, num_relations);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(cmpnn_cpu, m) {
  m.def("select_senders(Tensor keys, Tensor score, int n, int batch, int k) -> Tensor");
  m.def(
      "select_out_edges(Tensor s_keys, int n, int batch, Tensor out_ptr, Tensor out_edge, "
      "Tensor out_dst, Tensor out_rel, Tensor? mask, Tensor slot, Tensor score, "
      "Tensor const_score, int e, int num_relations) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(cmpnn_cpu, CPU, m) {
  m.impl("select_senders", &select_senders);
  m.impl("select_out_edges", &select_out_edges);
}
