// The precompiled header's own target needs a source (test_pch.h).
