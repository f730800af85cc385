// Helpers for propagating absl::Status across module edges without exceptions.
#ifndef WALSH_COMMON_STATUS_MACROS_H_
#define WALSH_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define WALSH_CONCAT_INNER_(a, b) a##b
#define WALSH_CONCAT_(a, b) WALSH_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` yields a non-OK status.
#define RETURN_IF_ERROR(expr)                      \
  do {                                             \
    ::absl::Status walsh_status_ = (expr);         \
    if (!walsh_status_.ok()) return walsh_status_; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, MakeX());` binds the value or returns the error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(WALSH_CONCAT_(walsh_statusor_, __LINE__), lhs, expr)

#define ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                           \
  if (!statusor.ok()) return statusor.status();     \
  lhs = std::move(statusor).value()

#endif  // WALSH_COMMON_STATUS_MACROS_H_
