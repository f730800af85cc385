// The donor of common/service_pch.h's precompiled header (an empty library: CMake compiles the
// header once for it and every service target reuses the result).
