// libprotobuf writes its own log lines ("[libprotobuf ERROR ...]") to stderr, e.g. for a
// request whose string field is not UTF-8; this sends them through LogJson instead, so the log
// stays one JSON object per line.
#ifndef WALSH_COMMON_PROTOBUF_LOG_H_
#define WALSH_COMMON_PROTOBUF_LOG_H_

namespace walsh {

// Call once, early in main.
void RouteProtobufLogsToJson();

}  // namespace walsh

#endif  // WALSH_COMMON_PROTOBUF_LOG_H_
