#include "common/raw_messages.h"

#include <string>
#include <vector>

#include "common/field_error.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/stubs/common.h"
#include "google/protobuf/unknown_field_set.h"
#include "grpcpp/impl/codegen/proto_utils.h"

namespace walsh {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::UnknownField;
using google::protobuf::UnknownFieldSet;

// Well-formed UTF-8 by protobuf's own check, the one its parser applies to string fields.
bool IsUtf8(const std::string& s) {
  return google::protobuf::internal::IsStructurallyValidUTF8(s.data(), static_cast<int>(s.size()));
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

absl::Status ParseRequest(const grpc::ByteBuffer& raw, google::protobuf::Message* out) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (raw.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) {
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  if (out->ParseFromString(bytes)) return absl::OkStatus();
  const std::string field = NonUtf8Field(out->GetDescriptor(), bytes, 0);
  if (field.empty()) {
    return absl::InvalidArgumentError("not a valid " + out->GetDescriptor()->full_name() +
                                      " message");
  }
  return FieldError(field, "not valid UTF-8");
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
