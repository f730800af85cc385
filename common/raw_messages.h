// Requests parsed by walsh itself rather than by gRPC: gRPC 1.51's callback handlers answer a
// request they cannot parse with UNIMPLEMENTED and no message (a proto3 string field that is not
// UTF-8 is enough), so the streaming methods take raw bytes and parse here, where a failure
// becomes INVALID_ARGUMENT naming the field.
#ifndef WALSH_COMMON_RAW_MESSAGES_H_
#define WALSH_COMMON_RAW_MESSAGES_H_

#include "absl/status/status.h"
#include "google/protobuf/message.h"
#include "grpcpp/support/byte_buffer.h"

namespace walsh {

// OK, or INVALID_ARGUMENT: a FieldError "FIELD: not valid UTF-8" (FIELD as a dotted path, e.g.
// "chat.messages.content"), or "not a valid TYPE message".
absl::Status ParseRequest(const grpc::ByteBuffer& raw, google::protobuf::Message* out);

grpc::ByteBuffer SerializeToByteBuffer(const google::protobuf::Message& message);

}  // namespace walsh

#endif  // WALSH_COMMON_RAW_MESSAGES_H_
