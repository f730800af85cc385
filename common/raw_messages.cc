#include "common/raw_messages.h"

#include <string>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/unknown_field_set.h"
#include "grpcpp/impl/codegen/proto_utils.h"

namespace walsh {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::UnknownField;
using google::protobuf::UnknownFieldSet;

// Well-formed UTF-8 as protobuf checks it: no overlong forms, no surrogates, <= U+10FFFF.
bool IsUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    size_t n = 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return false;
      const unsigned char b = s[i + k];
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return false;
    }
    i += n + 1;
  }
  return true;
}

// The dotted path of the first string field (at any depth) whose bytes are not UTF-8; "" if none.
std::string NonUtf8Field(const Descriptor* type, const std::string& bytes, int depth) {
  UnknownFieldSet fields;
  if (depth > 16 || !fields.ParseFromString(bytes)) return "";
  for (int i = 0; i < fields.field_count(); ++i) {
    const UnknownField& f = fields.field(i);
    const FieldDescriptor* d = type->FindFieldByNumber(f.number());
    if (d == nullptr || f.type() != UnknownField::TYPE_LENGTH_DELIMITED) continue;
    if (d->type() == FieldDescriptor::TYPE_STRING && !IsUtf8(f.length_delimited())) {
      return d->name();
    }
    if (d->type() == FieldDescriptor::TYPE_MESSAGE) {
      const std::string inner = NonUtf8Field(d->message_type(), f.length_delimited(), depth + 1);
      if (!inner.empty()) return d->name() + "." + inner;
    }
  }
  return "";
}

}  // namespace

grpc::Status ParseRequest(const grpc::ByteBuffer& raw, google::protobuf::Message* out) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (raw.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) {
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  if (out->ParseFromString(bytes)) return grpc::Status::OK;
  const std::string field = NonUtf8Field(out->GetDescriptor(), bytes, 0);
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                      field.empty()
                          ? "not a valid " + out->GetDescriptor()->full_name() + " message"
                          : field + ": not valid UTF-8");
}

grpc::ByteBuffer SerializeToByteBuffer(const google::protobuf::Message& message) {
  // gRPC's own protobuf serializer: what it does for typed methods, one copy at most.
  grpc::ByteBuffer buffer;
  bool own_buffer = false;
  (void)grpc::SerializationTraits<google::protobuf::Message>::Serialize(message, &buffer,
                                                                        &own_buffer);
  return buffer;
}

}  // namespace walsh
