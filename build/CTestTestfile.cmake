# CMake generated Testfile for 
# Source directory: /work/main
# Build directory: /work/main/build
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
add_test([=[test_cache]=] "/work/main/build/test_cache")
set_tests_properties([=[test_cache]=] PROPERTIES  ENVIRONMENT "TJIT_SOURCE_DIR=/work/main;TJIT_VERIFY=1" TIMEOUT "600" _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;106;add_test;/work/main/CMakeLists.txt;0;")
add_test([=[test_errors]=] "/work/main/build/test_errors")
set_tests_properties([=[test_errors]=] PROPERTIES  ENVIRONMENT "TJIT_SOURCE_DIR=/work/main;TJIT_VERIFY=1" TIMEOUT "600" _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;106;add_test;/work/main/CMakeLists.txt;0;")
add_test([=[test_interp]=] "/work/main/build/test_interp")
set_tests_properties([=[test_interp]=] PROPERTIES  ENVIRONMENT "TJIT_SOURCE_DIR=/work/main;TJIT_VERIFY=1" TIMEOUT "600" _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;106;add_test;/work/main/CMakeLists.txt;0;")
add_test([=[test_ir_text]=] "/work/main/build/test_ir_text")
set_tests_properties([=[test_ir_text]=] PROPERTIES  ENVIRONMENT "TJIT_SOURCE_DIR=/work/main;TJIT_VERIFY=1" TIMEOUT "600" _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;106;add_test;/work/main/CMakeLists.txt;0;")
add_test([=[test_ops_elementwise]=] "/work/main/build/test_ops_elementwise")
set_tests_properties([=[test_ops_elementwise]=] PROPERTIES  ENVIRONMENT "TJIT_SOURCE_DIR=/work/main;TJIT_VERIFY=1" TIMEOUT "600" _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;106;add_test;/work/main/CMakeLists.txt;0;")
add_test([=[test_ops_reduce_dot]=] "/work/main/build/test_ops_reduce_dot")
set_tests_properties([=[test_ops_reduce_dot]=] PROPERTIES  ENVIRONMENT "TJIT_SOURCE_DIR=/work/main;TJIT_VERIFY=1" TIMEOUT "600" _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;106;add_test;/work/main/CMakeLists.txt;0;")
add_test([=[test_ops_shape]=] "/work/main/build/test_ops_shape")
set_tests_properties([=[test_ops_shape]=] PROPERTIES  ENVIRONMENT "TJIT_SOURCE_DIR=/work/main;TJIT_VERIFY=1" TIMEOUT "600" _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;106;add_test;/work/main/CMakeLists.txt;0;")
add_test([=[test_passes]=] "/work/main/build/test_passes")
set_tests_properties([=[test_passes]=] PROPERTIES  ENVIRONMENT "TJIT_SOURCE_DIR=/work/main;TJIT_VERIFY=1" TIMEOUT "600" _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;106;add_test;/work/main/CMakeLists.txt;0;")
add_test([=[test_runtime]=] "/work/main/build/test_runtime")
set_tests_properties([=[test_runtime]=] PROPERTIES  ENVIRONMENT "TJIT_SOURCE_DIR=/work/main;TJIT_VERIFY=1" TIMEOUT "600" _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;106;add_test;/work/main/CMakeLists.txt;0;")
add_test([=[test_shape]=] "/work/main/build/test_shape")
set_tests_properties([=[test_shape]=] PROPERTIES  ENVIRONMENT "TJIT_SOURCE_DIR=/work/main;TJIT_VERIFY=1" TIMEOUT "600" _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;106;add_test;/work/main/CMakeLists.txt;0;")
add_test([=[test_trace]=] "/work/main/build/test_trace")
set_tests_properties([=[test_trace]=] PROPERTIES  ENVIRONMENT "TJIT_SOURCE_DIR=/work/main;TJIT_VERIFY=1" TIMEOUT "600" _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;106;add_test;/work/main/CMakeLists.txt;0;")
add_test([=[install_consumers]=] "sh" "/work/main/tests/install/check.sh" "/work/main/build" "/work/main")
set_tests_properties([=[install_consumers]=] PROPERTIES  _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;110;add_test;/work/main/CMakeLists.txt;0;")
add_test([=[golden_ir]=] "sh" "/work/main/tests/ir/run_golden.sh" "/work/main/build/tjit-opt" "/work/main/tests/ir")
set_tests_properties([=[golden_ir]=] PROPERTIES  _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;114;add_test;/work/main/CMakeLists.txt;0;")
