#include "tessel/pipeline/stages.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>

#include "tessel/core/error.h"

namespace tessel {

namespace {

constexpr size_t kMaxLayoutLength = 1'000'000;
constexpr int kMaxLayoutDepth = 64;

// Expands repeats and groups: "(tt|)*2L" -> "tt|tt|L". Appends problems to `errors`.
std::string expand_layout(const std::string& s, size_t& i, int depth, std::vector<std::string>& errors) {
  std::string out;
  while (i < s.size() && s[i] != ')') {
    std::string item;
    if (s[i] == '(') {
      if (depth >= kMaxLayoutDepth) {
        errors.push_back(fmt::format("--pipeline-model-parallel-layout: parentheses nested past {} deep", kMaxLayoutDepth));
        i = std::string::npos;  // abandoned: the callers stop without more messages
        return out;
      }
      ++i;
      item = expand_layout(s, i, depth + 1, errors);
      if (i == std::string::npos) return out;
      if (i >= s.size()) {
        errors.push_back("--pipeline-model-parallel-layout: '(' without ')'");
        return out;
      }
      ++i;  // ')'
    } else {
      item = std::string(1, s[i++]);
    }
    if (i < s.size() && s[i] == '*') {
      size_t digits = ++i;
      while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
      if (digits == i) {
        errors.push_back("--pipeline-model-parallel-layout: '*' needs a repeat count");
        continue;
      }
      // Bounded before expanding: a layout names each layer once, and no model has a million.
      const std::string count = s.substr(digits, i - digits);
      const size_t n = count.size() > 7 ? kMaxLayoutLength + 1 : std::stoul(count);
      if (n * item.size() + out.size() > kMaxLayoutLength) {
        errors.push_back(fmt::format("--pipeline-model-parallel-layout: '*{}' expands past {} entries", count,
                                     kMaxLayoutLength));
        continue;
      }
      std::string repeated;
      for (size_t r = 0; r < n; ++r) repeated += item;
      item = repeated;
    }
    if (out.size() + item.size() > kMaxLayoutLength) {
      errors.push_back(fmt::format("--pipeline-model-parallel-layout expands past {} entries", kMaxLayoutLength));
      i = std::string::npos;
      return out;
    }
    out += item;
  }
  if (depth == 0 && i < s.size()) {
    errors.push_back("--pipeline-model-parallel-layout: ')' without '('");
    ++i;
  }
  return out;
}

// The layout's '|'-separated entries, repeats and groups expanded, cosmetic commas dropped. A
// layout that does not parse (a bracket, a repeat, a character that names no layer, as Megatron's
// parse_str_to_list refuses) appends its errors and has no entries: the rules of a layout's
// entries would only restate them.
std::vector<std::string> layout_entries(const std::string& layout, std::vector<std::string>& errors) {
  const size_t before = errors.size();
  size_t i = 0;
  std::string flat = expand_layout(layout, i, 0, errors);
  while (i < layout.size() && flat.size() <= kMaxLayoutLength) flat += expand_layout(layout, ++i, 0, errors);
  std::string unknown;  // each character that names no layer, once
  std::vector<std::string> entries(1);
  for (char c : flat) {
    if (c == '|') entries.emplace_back();
    else if (c == 't' || c == 'm' || c == 'E' || c == 'L') entries.back() += c;
    else if (c != ',' && c != ' ' && unknown.find(c) == std::string::npos) unknown += c;
  }
  for (char c : unknown)
    errors.push_back(fmt::format("--pipeline-model-parallel-layout: unknown layer '{}' (t, m, E, L)", c));
  if (errors.size() > before) return {};
  return entries;
}

struct LayoutEntries {
  std::vector<int> layers;  // Transformer layers per model chunk
  std::vector<std::string> errors;
};

// Megatron's PipelineParallelLayerLayout rules: 'E' first, 'L' last, every 'm' (an MTP layer)
// after the last 't' and as many as --mtp-num-layers. tessel runs the MTP layers beside the head
// they share, so every 'm' must be in the last model chunk; Megatron's standalone placement (the
// 'm's in the last chunk of another pipeline rank) is not built.
LayoutEntries parse_layout(const std::string& layout, int chunks, int mtp_layers) {
  LayoutEntries r;
  const std::vector<std::string> entries = layout_entries(layout, r.errors);
  if (entries.empty()) return r;
  if (static_cast<int>(entries.size()) != chunks) {
    r.errors.push_back(fmt::format("--pipeline-model-parallel-layout has {} stages but PP × VPP is {}",
                                   entries.size(), chunks));
  }
  int mtp = 0;
  bool t_after_m = false, m_before_last = false;
  for (size_t k = 0; k < entries.size(); ++k) {
    int t = 0;
    for (char c : entries[k]) {
      if (c == 't') {
        ++t;
        t_after_m = t_after_m || mtp > 0;
      } else if (c == 'm') {
        ++mtp;
        m_before_last = m_before_last || k + 1 != entries.size();
      } else if (c == 'E' && k != 0)
        r.errors.push_back("--pipeline-model-parallel-layout: the embedding 'E' must be in the first stage");
      else if (c == 'L' && k + 1 != entries.size())
        r.errors.push_back("--pipeline-model-parallel-layout: the loss 'L' must be in the last stage");
    }
    r.layers.push_back(t);
  }
  if (entries.front().find('E') == std::string::npos)
    r.errors.push_back("--pipeline-model-parallel-layout: the first stage must hold the embedding 'E'");
  else if (entries.front().front() != 'E')
    r.errors.push_back("--pipeline-model-parallel-layout: the first layer must be the embedding 'E' (Megatron's rule)");
  if (entries.back().find('L') == std::string::npos)
    r.errors.push_back("--pipeline-model-parallel-layout: the last stage must hold the loss 'L'");
  else if (entries.back().back() != 'L')
    r.errors.push_back("--pipeline-model-parallel-layout: the last layer must be the loss 'L' (Megatron's rule)");
  for (char layer : {'E', 'L'}) {
    size_t given = 0;
    for (const std::string& entry : entries) given += std::count(entry.begin(), entry.end(), layer);
    if (given > 1)
      r.errors.push_back(fmt::format("--pipeline-model-parallel-layout: the {} '{}' is given {} times: once, as "
                                     "Megatron's rule", layer == 'E' ? "embedding" : "loss", layer, given));
  }
  if (mtp != mtp_layers)
    r.errors.push_back(fmt::format("--pipeline-model-parallel-layout holds {} MTP layers 'm' but --mtp-num-layers is {}",
                                   mtp, mtp_layers));
  if (t_after_m)
    r.errors.push_back("--pipeline-model-parallel-layout: every Transformer layer 't' must come before the MTP layers 'm'");
  if (m_before_last)
    r.errors.push_back("--pipeline-model-parallel-layout: MTP layers 'm' outside the last stage (Megatron's standalone "
                       "MTP stage) are not built: put them in the last stage, with 'L'");
  return r;
}

// "t*7|" for a model chunk of 7 layers, the last chunk's "|" left to the caller.
std::string chunk_text(int layers) { return layers == 1 ? "t" : layers == 0 ? "" : fmt::format("t*{}", layers); }

// Two uneven splits that work, for L layers that do not divide over the chunks: with one chunk a
// stage, the first and last stage lighter (they also hold the embedding and the loss) and the
// others L / PP rounded up; and a layout string giving every chunk L / chunks rounded down or up,
// the lighter chunks at both ends.
std::string uneven_splits(int L, int p, int vpp) {
  const int chunks = p * vpp;
  std::vector<std::string> splits;
  if (vpp == 1) {
    int middle = (L + p - 1) / p;
    while (L - (p - 2) * middle < 0) --middle;
    const int ends = L - (p - 2) * middle;
    splits.push_back(fmt::format("--decoder-first-pipeline-num-layers {} --decoder-last-pipeline-num-layers {}{}",
                                 ends / 2, ends - ends / 2,
                                 p > 2 ? fmt::format(" ({} layers on each other stage)", middle) : ""));
  }
  std::vector<int> counts(chunks, L / chunks);
  const int heavier = L % chunks, lighter_first = (chunks - heavier + 1) / 2;
  for (int c = lighter_first; c < lighter_first + heavier; ++c) ++counts[c];
  // Runs of equal chunks as "(t*8|)*4"; the last chunk ends with the loss instead of "|".
  std::string layout = "E";
  for (int c = 0; c + 1 < chunks;) {
    int run = 1;
    while (c + run + 1 < chunks && counts[c + run] == counts[c]) ++run;
    layout += run == 1 ? chunk_text(counts[c]) + "|" : fmt::format("({}|)*{}", chunk_text(counts[c]), run);
    c += run;
  }
  layout += chunk_text(counts.back()) + "L";
  splits.push_back(fmt::format("--pipeline-model-parallel-layout '{}' ({} layers a {}{})", layout,
                               fmt::join(counts, ", "), vpp > 1 ? "model chunk" : "stage",
                               vpp > 1 ? ", in place of --num-virtual-stages-per-pipeline-rank" : ""));
  return fmt::format("{}", fmt::join(splits, ", or "));
}

// Layers per model chunk, or the reasons there is none.
std::vector<int> layer_counts(int L, const StageOptions& o, std::vector<std::string>& v) {
  const int p = o.pipeline_size, vpp = o.virtual_stages, chunks = p * vpp;
  if (p < 1 || vpp < 1) {
    v.push_back("--pipeline-model-parallel-size and --num-virtual-stages-per-pipeline-rank must be positive");
    return {};
  }
  const bool uneven = o.first_stage_layers >= 0 || o.last_stage_layers >= 0;
  if (!o.layout.empty()) {
    if (uneven)
      v.push_back("--pipeline-model-parallel-layout cannot be combined with "
                  "--decoder-first/last-pipeline-num-layers");
    LayoutEntries e = parse_layout(o.layout, chunks, o.mtp_layers);
    v.insert(v.end(), e.errors.begin(), e.errors.end());
    if (e.layers.empty()) return {};  // it did not parse
    int total = 0;
    for (int t : e.layers) total += t;
    if (total != L)
      v.push_back(fmt::format("--pipeline-model-parallel-layout holds {} layers but --num-layers is {}",
                              total, L));
    return e.layers;
  }
  if (!uneven) {
    if (L % chunks != 0 && o.placement == Placement::V) {
      v.push_back(fmt::format("--num-layers {} does not split into the 2 × --pipeline-model-parallel-size {} = {} "
                              "model chunks of a V schedule (zb-v, dualpipev: two chunks per rank)", L, p, chunks));
      return {};
    }
    if (L % chunks != 0) {
      const std::string sizes = vpp > 1 ? fmt::format("--pipeline-model-parallel-size {} × "
                                                      "--num-virtual-stages-per-pipeline-rank {}", p, vpp)
                                        : fmt::format("--pipeline-model-parallel-size {}", p);
      v.push_back(fmt::format("--num-layers {} is not divisible by {} ({} / {} = {:.4g} layers a {}); splits "
                              "that work: {}", L, sizes, L, chunks, static_cast<double>(L) / chunks,
                              vpp > 1 ? "model chunk" : "stage", uneven_splits(L, p, vpp)));
      return {};
    }
    return std::vector<int>(chunks, L / chunks);
  }
  if (vpp > 1) {
    v.push_back("--decoder-first/last-pipeline-num-layers with virtual stages: use "
                "--pipeline-model-parallel-layout");
    return {};
  }
  if (p < 2) {
    v.push_back("--decoder-first/last-pipeline-num-layers need --pipeline-model-parallel-size > 1");
    return {};
  }
  const int first = o.first_stage_layers, last = o.last_stage_layers;
  int middle_stages = p - (first >= 0) - (last >= 0);
  int middle_layers = L - std::max(first, 0) - std::max(last, 0);
  if (middle_layers < 0 || (middle_stages == 0 && middle_layers != 0) ||
      (middle_stages > 0 && middle_layers % middle_stages != 0)) {
    v.push_back(fmt::format("--num-layers {} minus the first/last stages' layers ({}) does not split "
                            "evenly over the {} other stages", L, L - middle_layers, middle_stages));
    return {};
  }
  std::vector<int> counts(p, middle_stages > 0 ? middle_layers / middle_stages : 0);
  if (first >= 0) counts.front() = first;
  if (last >= 0) counts.back() = last;
  return counts;
}

}  // namespace

int layout_stage_count(const std::string& layout, std::vector<std::string>& errors) {
  return static_cast<int>(layout_entries(layout, errors).size());
}

std::vector<std::string> stage_violations(int num_layers, const StageOptions& options) {
  std::vector<std::string> v;
  layer_counts(num_layers, options, v);
  return v;
}

std::vector<ChunkSpec> assign_layers(int num_layers, const StageOptions& options) {
  std::vector<std::string> v;
  std::vector<int> counts = layer_counts(num_layers, options, v);
  if (!v.empty()) {
    std::string msg = "invalid pipeline split: " + v[0];
    for (size_t i = 1; i < v.size(); ++i) msg += "; " + v[i];
    throw ConfigError(msg);
  }
  std::vector<ChunkSpec> chunks;
  int first = 0;
  for (size_t k = 0; k < counts.size(); ++k) {
    chunks.push_back({first, counts[k], k == 0, k + 1 == counts.size()});
    first += counts[k];
  }
  return chunks;
}

std::vector<ChunkSpec> rank_chunks(const std::vector<ChunkSpec>& all, const StageOptions& o, int rank) {
  std::vector<ChunkSpec> mine;
  for (int c = 0; c < o.virtual_stages; ++c)
    mine.push_back(all.at(model_chunk_index(rank, c, o.pipeline_size, o.placement)));
  return mine;
}

}  // namespace tessel
