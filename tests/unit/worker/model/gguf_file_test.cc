// GGUF reader and writer: every value type, typed accessors, and structural errors.
#include "worker/model/gguf_file.h"

#include <cstring>
#include <string>

#include "gtest/gtest.h"
#include "tests/util/test_util.h"
#include "worker/model/ggml_types.h"
#include "worker/model/gguf_writer.h"

namespace walsh {
namespace {

// A writer with one key of each value type (nested arrays included) and two small tensors.
GgufWriter AllTypesWriter() {
  GgufWriter w;
  w.SetKv("u8", GgufValue::Uint(GgufType::kUint8, 200));
  w.SetKv("i8", GgufValue::Int(GgufType::kInt8, -100));
  w.SetKv("u16", GgufValue::Uint(GgufType::kUint16, 60000));
  w.SetKv("i16", GgufValue::Int(GgufType::kInt16, -30000));
  w.SetKv("u32", GgufValue::U32(4000000000u));
  w.SetKv("i32", GgufValue::I32(-2000000000));
  w.SetKv("f32", GgufValue::F32(1e-6f));
  w.SetKv("bool", GgufValue::Bool(true));
  w.SetKv("str", GgufValue::String("héllo"));
  w.SetKv("u64", GgufValue::Uint(GgufType::kUint64, 1ull << 63));
  w.SetKv("i64", GgufValue::Int(GgufType::kInt64, -(1ll << 62)));
  w.SetKv("f64", GgufValue::Float(GgufType::kFloat64, 3.141592653589793));
  w.SetKv("arr_i32", GgufValue::I32Array({1, -1, 7}));
  w.SetKv("arr_str", GgufValue::StringArray({"a", "", "b c"}));
  w.SetKv("arr_nested",
          GgufValue::Array(GgufType::kArray, {GgufValue::I32Array({1, 2}), GgufValue::I32Array({}),
                                              GgufValue::I32Array({3})}));
  w.SetKv("general.alignment", GgufValue::U32(64));
  EXPECT_TRUE(w.AddTensor("a", {4, 3}, kGgmlF32).ok());
  EXPECT_TRUE(w.AddTensor("b", {256}, kGgmlPq2_0).ok());
  return w;
}

GgufWriter::TensorFiller PatternFiller() {
  return [](size_t i, const GgufTensorSpec& spec, GgufByteSink& sink) {
    std::string bytes(spec.n_bytes, '\0');
    for (size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<char>(i * 31 + k);
    return sink.Write(bytes.data(), bytes.size());
  };
}

TEST(GgufFile, RoundTripsEveryValueType) {
  GgufWriter w = AllTypesWriter();
  auto bytes = w.WriteString(PatternFiller());
  ASSERT_TRUE(bytes.ok());
  auto f = GgufFile::Parse(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size());
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ((*f)->kvs().size(), w.kvs().size());
  for (size_t i = 0; i < w.kvs().size(); ++i) {
    EXPECT_EQ((*f)->kvs()[i].first, w.kvs()[i].first);
    EXPECT_TRUE((*f)->kvs()[i].second == w.kvs()[i].second) << w.kvs()[i].first;
  }
  EXPECT_EQ((*f)->alignment(), 64u);
  EXPECT_EQ((*f)->data_offset() % 64, 0u);
  ASSERT_EQ((*f)->tensors().size(), 2u);
  const GgufTensorInfo* b = (*f)->FindTensor("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->n_bytes, 68u);
  EXPECT_EQ(b->offset % 64, 0u);
  for (size_t k = 0; k < b->n_bytes; ++k) ASSERT_EQ(b->data[k], static_cast<uint8_t>(31 + k));
}

TEST(GgufFile, TypedAccessorsAcceptAnyIntegerType) {
  auto bytes = AllTypesWriter().WriteString(PatternFiller());
  auto f = GgufFile::Parse(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size());
  ASSERT_TRUE(f.ok());
  const GgufFile& g = **f;
  EXPECT_EQ(*g.GetInt("u8", 0, 1000), 200);
  EXPECT_EQ(*g.GetInt("i16", -40000, 0), -30000);
  EXPECT_EQ(*g.GetInt("u32", 0, INT64_MAX), 4000000000);
  EXPECT_FALSE(g.GetInt("u64", 0, INT64_MAX).ok());  // 2^63 does not fit
  auto out_of_range = g.GetInt("u8", 0, 100);
  ASSERT_FALSE(out_of_range.ok());
  EXPECT_NE(out_of_range.status().message().find("'u8'"), std::string::npos);
  auto wrong = g.GetInt("f32", 0, 1);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("key 'f32' has type FLOAT32"), std::string::npos);
  auto missing = g.GetString("nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing key 'nope'"), std::string::npos);
  EXPECT_FLOAT_EQ(static_cast<float>(*g.GetFloat("f32")), 1e-6f);
  EXPECT_TRUE(*g.GetBool("bool"));
  EXPECT_EQ(*g.GetString("str"), "héllo");
  EXPECT_EQ(*g.GetIntArray("arr_i32"), (std::vector<int64_t>{1, -1, 7}));
  EXPECT_EQ(*g.GetStringArray("arr_str"), (std::vector<std::string>{"a", "", "b c"}));
  EXPECT_FALSE(g.GetIntArray("arr_str").ok());
  EXPECT_EQ(g.FindKey("arr_nested")->elems()[2].elems()[0].raw_int(), 3);
}

TEST(GgufFile, EveryTruncationIsAnErrorNotACrash) {
  auto bytes = AllTypesWriter().WriteString(PatternFiller());
  ASSERT_TRUE(bytes.ok());
  auto whole = GgufFile::Parse(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size());
  ASSERT_TRUE(whole.ok());
  // The zero padding after the last tensor's data is not needed to read the file.
  const GgufTensorInfo& last = (*whole)->tensors().back();
  const size_t data_end = (*whole)->data_offset() + last.offset + last.n_bytes;
  ASSERT_LT(data_end, bytes->size());
  for (size_t n = 0; n < data_end; ++n) {
    std::string prefix = bytes->substr(0, n);
    auto f = GgufFile::Parse(reinterpret_cast<const uint8_t*>(prefix.data()), prefix.size());
    EXPECT_FALSE(f.ok()) << "prefix of " << n << " bytes was accepted";
  }
}

std::string Serialize(GgufWriter& w) { return *w.WriteString(PatternFiller()); }

absl::Status ParseStatus(const std::string& bytes) {
  auto f = GgufFile::Parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return f.status();
}

void ExpectRefused(const std::string& bytes, const std::string& needle) {
  const absl::Status s = ParseStatus(bytes);
  ASSERT_FALSE(s.ok()) << "expected a refusal mentioning " << needle;
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
}

TEST(GgufFile, RefusesStructuralLies) {
  GgufWriter w = AllTypesWriter();
  std::string good = Serialize(w);

  std::string bad_magic = good;
  bad_magic[0] = 'X';
  ExpectRefused(bad_magic, "magic");

  std::string v2 = good;
  v2[4] = 2;
  ExpectRefused(v2, "version 2");

  GgufWriter odd_align = AllTypesWriter();
  odd_align.SetKv("general.alignment", GgufValue::U32(48));
  ExpectRefused(Serialize(odd_align), "general.alignment");
  odd_align.SetKv("general.alignment", GgufValue::Uint(GgufType::kUint64, 32));
  ExpectRefused(Serialize(odd_align), "general.alignment");

  GgufWriter bad_bool;
  bad_bool.SetKv("flag", GgufValue::Uint(GgufType::kBool, 2));
  ExpectRefused(Serialize(bad_bool), "BOOL");

  // A tensor count that the file cannot hold.
  std::string many = good;
  const uint64_t huge = 1ull << 60;
  std::memcpy(&many[8], &huge, 8);
  ExpectRefused(many, "truncated");

  // An unknown value type in the first key.
  std::string bad_type = good;
  const size_t type_pos = 24 + 8 + 2;  // header, key length, "u8"
  bad_type[type_pos] = 77;
  ExpectRefused(bad_type, "not a GGUF value type");

  // An array that claims more elements than the file has bytes.
  GgufWriter arr;
  arr.SetKv("k", GgufValue::I32Array({1, 2, 3}));
  std::string arr_bytes = Serialize(arr);
  const uint64_t lots = 1ull << 40;
  std::memcpy(&arr_bytes[24 + 8 + 1 + 4 + 4], &lots, 8);
  ExpectRefused(arr_bytes, "claims");
}

TEST(GgufFile, RefusesBadTensorTable) {
  GgufWriter dup = AllTypesWriter();
  ASSERT_TRUE(dup.AddTensor("a", {4}, kGgmlF32).ok());
  ExpectRefused(Serialize(dup), "duplicate tensor name 'a'");

  // Unknown ggml type, and a PQ2_0 width that is not a whole number of blocks.
  GgufWriter w = AllTypesWriter();
  w.mutable_tensors()[0].type = 77;
  ExpectRefused(Serialize(w), "tensor 'a' has ggml type 77");
  GgufWriter odd = AllTypesWriter();
  odd.mutable_tensors()[1].ne = {100};
  odd.mutable_tensors()[1].n_bytes = 0;
  ExpectRefused(Serialize(odd), "tensor 'b' of type PQ2_0 has ne[0] = 100");

  // Data that runs past the end of the file.
  GgufWriter base = AllTypesWriter();
  std::string good = Serialize(base);
  auto whole = GgufFile::Parse(reinterpret_cast<const uint8_t*>(good.data()), good.size());
  ASSERT_TRUE(whole.ok());
  const GgufTensorInfo* b = (*whole)->FindTensor("b");
  const size_t b_end = (*whole)->data_offset() + b->offset + b->n_bytes;
  ExpectRefused(good.substr(0, b_end - 1), "tensor 'b' data");

  // A misaligned data offset: patch tensor b's offset field.
  std::string misaligned = good;
  const size_t name_pos = misaligned.find(std::string("\x01\0\0\0\0\0\0\0b", 9));
  ASSERT_NE(name_pos, std::string::npos);
  const size_t offset_pos = name_pos + 9 + 4 + 8 + 4;
  uint64_t offset;
  std::memcpy(&offset, &misaligned[offset_pos], 8);
  offset += 4;
  std::memcpy(&misaligned[offset_pos], &offset, 8);
  ExpectRefused(misaligned, "tensor 'b' has data offset");

  // Overlapping tensors: point b at a's data.
  std::string overlap = good;
  const uint64_t zero = 0;
  std::memcpy(&overlap[offset_pos], &zero, 8);
  ExpectRefused(overlap, "overlaps");
}

TEST(GgufFile, RefusesTheRegressionCorpus) {
  const std::pair<const char*, const char*> cases[] = {
      {"nested_arrays_too_deep.gguf", "nested deeper"},     {"array_count_lies.gguf", "claims"},
      {"tensor_shape_overflow.gguf", "impossible shape"},   {"string_length_lies.gguf", "claims"},
      {"tensor_offset_past_end.gguf", "runs past the end"},
  };
  for (const auto& [file, needle] : cases) {
    ExpectRefused(testing::ReadFileOrDie(std::string(WALSH_SOURCE_DIR) +
                                         "/tests/fuzz/corpus/gguf_reader/" + file),
                  needle);
  }
}

TEST(GgufWriter, RejectsShapesTheTypeCannotHold) {
  GgufWriter w;
  EXPECT_FALSE(w.AddTensor("x", {100}, kGgmlPq2_0).ok());
  EXPECT_FALSE(w.AddTensor("x", {128}, 99).ok());
  EXPECT_FALSE(w.AddTensor("x", {}, kGgmlF32).ok());
}

}  // namespace
}  // namespace walsh
