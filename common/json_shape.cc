#include "common/json_shape.h"

#include "nlohmann/json.hpp"

namespace walsh {
namespace {

class ShapeCounter : public nlohmann::json_sax<nlohmann::json> {
 public:
  ShapeCounter(int max_depth, int64_t max_values)
      : max_depth_(max_depth), max_values_(max_values) {}
  JsonShape shape = JsonShape::kOk;

  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t&) override { return Value(); }
  bool string(string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }
  bool start_object(std::size_t) override { return Open(); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    if (shape == JsonShape::kOk) shape = JsonShape::kInvalid;
    return false;
  }

 private:
  bool Value() {
    if (++values_ > max_values_) shape = JsonShape::kTooManyValues;
    return shape == JsonShape::kOk;
  }
  bool Open() {
    if (++depth_ > max_depth_) shape = JsonShape::kTooDeep;
    return Value();
  }
  bool Close() {
    --depth_;
    return true;
  }

  const int max_depth_;
  const int64_t max_values_;
  int depth_ = 0;
  int64_t values_ = 0;
};

}  // namespace

JsonShape CheckJsonShape(const std::string& text, int max_depth, int64_t max_values) {
  ShapeCounter counter(max_depth, max_values);
  const bool ok = nlohmann::json::sax_parse(text, &counter, nlohmann::json::input_format_t::json,
                                            /*strict=*/true, /*ignore_comments=*/false);
  if (!ok && counter.shape == JsonShape::kOk) return JsonShape::kInvalid;
  return counter.shape;
}

}  // namespace walsh
