#include "diskformer/convert/raw_model.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "diskformer/convert/quantize.h"
#include "diskformer/gguf/reader.h"
#include "diskformer/gguf/writer.h"
#include "diskformer/model/arch_metadata.h"

namespace df::convert {

namespace fs = std::filesystem;
using gguf::GgmlType;
using gguf::Value;
using nlohmann::json;

uint64_t RawTensor::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

namespace {

Result<uint32_t> get_u32(const json& h, const std::string& manifest, const char* key) {
  auto it = h.find(key);
  if (it == h.end() || !it->is_number_unsigned() || it->get<uint64_t>() > UINT32_MAX)
    return Error{manifest + ": hparams." + key + " is missing or not a non-negative integer"};
  return it->get<uint32_t>();
}

Result<double> get_number(const json& h, const std::string& manifest, const char* key) {
  auto it = h.find(key);
  if (it == h.end() || !it->is_number()) return Error{manifest + ": hparams." + key + " is missing or not a number"};
  return it->get<double>();
}

}  // namespace

Result<RawModel> read_raw_model(const std::string& dir) {
  const std::string manifest = (fs::path(dir) / "manifest.json").string();
  std::ifstream in(manifest);
  if (!in) return Error{"cannot read " + manifest};
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    return Error{manifest + ": not valid JSON: " + e.what()};
  }
  RawModel m;
  m.dir = dir;
  if (!j.contains("arch") || !j["arch"].is_string()) return Error{manifest + ": \"arch\" is missing"};
  m.arch = j["arch"].get<std::string>();
  if (m.arch != "qwen3moe") return Error{manifest + ": architecture '" + m.arch + "' is not supported (qwen3moe)"};
  m.name = j.value("name", std::string("trained ") + m.arch);
  if (!j.contains("hparams") || !j["hparams"].is_object()) return Error{manifest + ": \"hparams\" is missing"};
  const json& h = j["hparams"];
  RawHparams& p = m.hparams;
  DF_ASSIGN(p.n_layer, get_u32(h, manifest, "n_layer"));
  DF_ASSIGN(p.n_embd, get_u32(h, manifest, "n_embd"));
  DF_ASSIGN(p.n_head, get_u32(h, manifest, "n_head"));
  DF_ASSIGN(p.n_head_kv, get_u32(h, manifest, "n_head_kv"));
  DF_ASSIGN(p.head_dim, get_u32(h, manifest, "head_dim"));
  DF_ASSIGN(p.n_ff, get_u32(h, manifest, "n_ff"));
  DF_ASSIGN(p.n_expert, get_u32(h, manifest, "n_expert"));
  DF_ASSIGN(p.n_expert_used, get_u32(h, manifest, "n_expert_used"));
  DF_ASSIGN(p.n_ff_expert, get_u32(h, manifest, "n_ff_expert"));
  DF_ASSIGN(p.context_length, get_u32(h, manifest, "context_length"));
  DF_ASSIGN(p.rope_freq_base, get_number(h, manifest, "rope_freq_base"));
  DF_ASSIGN(p.rms_eps, get_number(h, manifest, "rms_eps"));
  if (p.n_layer == 0 || p.n_embd == 0 || p.n_head == 0 || p.head_dim == 0 || p.n_ff_expert == 0)
    return Error{manifest + ": hparams: layers, width, heads, head_dim and n_ff_expert must be positive"};
  if (p.n_head_kv == 0 || p.n_head % p.n_head_kv != 0)
    return Error{manifest + ": hparams: n_head " + std::to_string(p.n_head) + " is not a multiple of n_head_kv " +
                 std::to_string(p.n_head_kv)};
  if (p.n_expert == 0 || p.n_expert_used == 0 || p.n_expert_used > p.n_expert)
    return Error{manifest + ": hparams: n_expert_used " + std::to_string(p.n_expert_used) +
                 " must be between 1 and n_expert " + std::to_string(p.n_expert)};

  if (!j.contains("tensors") || !j["tensors"].is_array()) return Error{manifest + ": \"tensors\" is missing"};
  std::set<std::string> names;
  for (size_t i = 0; i < j["tensors"].size(); ++i) {
    const json& t = j["tensors"][i];
    const std::string where = manifest + ": tensors[" + std::to_string(i) + "]";
    if (!t.contains("name") || !t["name"].is_string() || !t.contains("file") || !t["file"].is_string() ||
        !t.contains("shape") || !t["shape"].is_array() || t["shape"].empty() || t["shape"].size() > 4)
      return Error{where + ": needs name, file and a shape of 1 to 4 dimensions"};
    RawTensor rt{t["name"].get<std::string>(), t["file"].get<std::string>(), {}};
    for (const json& d : t["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() == 0) return Error{where + ": shape has a non-positive entry"};
      rt.shape.push_back(d.get<uint64_t>());
    }
    if (!names.insert(rt.name).second) return Error{where + ": tensor " + rt.name + " appears twice"};
    const fs::path f = fs::path(dir) / rt.file;
    std::error_code ec;
    const uint64_t size = fs::file_size(f, ec);
    if (ec) return Error{where + ": cannot read " + f.string() + ": " + ec.message()};
    if (size != rt.elements() * 4)
      return Error{f.string() + ": " + std::to_string(size) + " bytes, but the shape of " + rt.name + " needs " +
                   std::to_string(rt.elements() * 4) + " (float32)"};
    m.tensors.push_back(std::move(rt));
  }
  if (!names.count("token_embd.weight")) return Error{manifest + ": token_embd.weight is missing"};
  return m;
}

GgmlType tensor_type(const RawTensor& t, GgmlType matrix_type) {
  const bool router = t.name.size() >= 19 && t.name.compare(t.name.size() - 19, 19, "ffn_gate_inp.weight") == 0;
  return t.shape.size() < 2 || router ? GgmlType::F32 : matrix_type;
}

Status convert_raw(const ConvertOptions& o) {
  if (o.type != GgmlType::F32 && o.type != GgmlType::F16 && o.type != GgmlType::Q8_0 && o.type != GgmlType::Q4_0)
    return Error{"convert: type " + std::string(gguf::type_name(o.type)) + " is not supported (f32, f16, q8_0, q4_0)"};
  DF_ASSIGN(RawModel m, read_raw_model(o.raw_dir));
  DF_ASSIGN(gguf::File tok, gguf::read_file(o.tokenizer_from));
  DF_ASSIGN(const gguf::Array* tokens, tok.get_array("tokenizer.ggml.tokens"));
  const uint64_t n_vocab = tokens->items.size();
  for (const RawTensor& t : m.tensors) {
    if (t.name == "token_embd.weight" && (t.shape.size() != 2 || t.shape[0] != n_vocab))
      return Error{o.raw_dir + ": token_embd.weight has " + std::to_string(t.shape[0]) + " rows, but " +
                   o.tokenizer_from + " has a vocabulary of " + std::to_string(n_vocab)};
    const uint32_t block = gguf::type_info(tensor_type(t, o.type))->block_elems;
    if (t.shape.back() % block != 0)
      return Error{o.raw_dir + ": " + t.name + ": rows of " + std::to_string(t.shape.back()) +
                   " values are not a multiple of the " + std::string(gguf::type_name(o.type)) + " block of " +
                   std::to_string(block)};
  }

  DF_ASSIGN(gguf::Writer w, gguf::Writer::create(o.out));
  const RawHparams& p = m.hparams;
  model::set_arch_metadata(w, {.arch = m.arch,
                               .name = m.name,
                               .file_type = o.type,
                               .n_layer = p.n_layer,
                               .context = p.context_length,
                               .n_embd = p.n_embd,
                               .n_ff = p.n_ff,
                               .n_head = p.n_head,
                               .n_head_kv = p.n_head_kv,
                               .head_dim = p.head_dim,
                               .n_expert = p.n_expert,
                               .n_expert_used = p.n_expert_used,
                               .n_ff_expert = p.n_ff_expert,
                               .rope_base = p.rope_freq_base,
                               .rms_eps = p.rms_eps});
  model::copy_tokenizer_metadata(w, tok);

  for (const RawTensor& t : m.tensors)
    DF_TRY(w.add_tensor(t.name, tensor_type(t, o.type), std::vector<uint64_t>(t.shape.rbegin(), t.shape.rend())));
  DF_TRY(w.write_header());

  std::vector<float> values;
  std::vector<uint8_t> bytes;
  for (const RawTensor& t : m.tensors) {
    const fs::path f = fs::path(o.raw_dir) / t.file;
    std::ifstream in(f, std::ios::binary);
    values.resize(t.elements());
    if (!in.read(reinterpret_cast<char*>(values.data()), std::streamsize(values.size() * 4)))
      return Error{"cannot read " + f.string() + " (" + std::to_string(values.size() * 4) + " bytes expected)"};
    const GgmlType type = tensor_type(t, o.type);
    bytes.resize(gguf::row_bytes(type, values.size()));
    // Rows are quantized one by one; a block never spans two rows because the row length is a block multiple.
    DF_TRY(encode(type, values, bytes.data()));
    DF_TRY(w.write_data(bytes.data(), bytes.size()));
  }
  return w.finish();
}

}  // namespace df::convert
