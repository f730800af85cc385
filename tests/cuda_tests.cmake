# The CUDA tests, in the full and the engine-only builds; they skip where no device answers.
add_executable(cuda_probe_test unit/kernels/cuda/cuda_probe_test.cc)
target_link_libraries(cuda_probe_test PRIVATE walsh_kernels_cuda GTest::gtest_main)
walsh_discover_tests(cuda_probe_test unit-engine)
add_executable(cuda_engine_test unit/worker/engine/cuda_engine_test.cc)
target_link_libraries(cuda_engine_test PRIVATE walsh_engine walsh_mkmodel_lib walsh_test_util
  nlohmann_json::nlohmann_json GTest::gtest_main)
walsh_discover_tests(cuda_engine_test unit-engine)
add_executable(cuda_vision_encoder_test unit/worker/vision/cuda_vision_encoder_test.cc)
target_link_libraries(cuda_vision_encoder_test PRIVATE walsh_vision_encoder walsh_mkmodel_lib
  walsh_test_util GTest::gmock GTest::gtest_main)
walsh_discover_tests(cuda_vision_encoder_test unit-engine)
# The GPU machine's kernel check (tests/gpu/run.sh builds it there from the kernels alone);
# compiled here too so CI keeps it building.
add_executable(gpu_check gpu/gpu_check.cu)
target_compile_options(gpu_check PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--fmad=false>)
target_link_libraries(gpu_check PRIVATE walsh_kernels_cuda walsh_kernels_cpu)
set_property(GLOBAL APPEND PROPERTY WALSH_RELEASE_TARGETS gpu_check)  # CI's Release phase builds it
# The kernels' static check (tests/gpu/static_check.sh): no spills, 128-bit loads in the lanes
# mat-vec; nvcc alone, no device.
add_test(NAME cuda_static_check
  COMMAND ${CMAKE_SOURCE_DIR}/tests/gpu/static_check.sh ${CMAKE_CUDA_COMPILER})
# Its 15 s of nvcc start first (COST), beside the rest of the Release phase, not after it.
set_tests_properties(cuda_static_check PROPERTIES LABELS unit-engine TIMEOUT 300 COST 100)
