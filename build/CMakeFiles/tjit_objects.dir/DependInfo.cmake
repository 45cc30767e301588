
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/src/ir/arena.c" "CMakeFiles/tjit_objects.dir/src/ir/arena.c.o" "gcc" "CMakeFiles/tjit_objects.dir/src/ir/arena.c.o.d"
  "/work/main/src/ir/dtype.c" "CMakeFiles/tjit_objects.dir/src/ir/dtype.c.o" "gcc" "CMakeFiles/tjit_objects.dir/src/ir/dtype.c.o.d"
  "/work/main/src/ir/interp.c" "CMakeFiles/tjit_objects.dir/src/ir/interp.c.o" "gcc" "CMakeFiles/tjit_objects.dir/src/ir/interp.c.o.d"
  "/work/main/src/ir/ir.c" "CMakeFiles/tjit_objects.dir/src/ir/ir.c.o" "gcc" "CMakeFiles/tjit_objects.dir/src/ir/ir.c.o.d"
  "/work/main/src/ir/parse.c" "CMakeFiles/tjit_objects.dir/src/ir/parse.c.o" "gcc" "CMakeFiles/tjit_objects.dir/src/ir/parse.c.o.d"
  "/work/main/src/ir/passes/canonicalize.c" "CMakeFiles/tjit_objects.dir/src/ir/passes/canonicalize.c.o" "gcc" "CMakeFiles/tjit_objects.dir/src/ir/passes/canonicalize.c.o.d"
  "/work/main/src/ir/passes/cse.c" "CMakeFiles/tjit_objects.dir/src/ir/passes/cse.c.o" "gcc" "CMakeFiles/tjit_objects.dir/src/ir/passes/cse.c.o.d"
  "/work/main/src/ir/passes/dce.c" "CMakeFiles/tjit_objects.dir/src/ir/passes/dce.c.o" "gcc" "CMakeFiles/tjit_objects.dir/src/ir/passes/dce.c.o.d"
  "/work/main/src/ir/passes/pipeline.c" "CMakeFiles/tjit_objects.dir/src/ir/passes/pipeline.c.o" "gcc" "CMakeFiles/tjit_objects.dir/src/ir/passes/pipeline.c.o.d"
  "/work/main/src/ir/print.c" "CMakeFiles/tjit_objects.dir/src/ir/print.c.o" "gcc" "CMakeFiles/tjit_objects.dir/src/ir/print.c.o.d"
  "/work/main/src/ir/shape.c" "CMakeFiles/tjit_objects.dir/src/ir/shape.c.o" "gcc" "CMakeFiles/tjit_objects.dir/src/ir/shape.c.o.d"
  "/work/main/src/ir/verify.c" "CMakeFiles/tjit_objects.dir/src/ir/verify.c.o" "gcc" "CMakeFiles/tjit_objects.dir/src/ir/verify.c.o.d"
  "/work/main/src/runtime/array.c" "CMakeFiles/tjit_objects.dir/src/runtime/array.c.o" "gcc" "CMakeFiles/tjit_objects.dir/src/runtime/array.c.o.d"
  "/work/main/src/runtime/cache.c" "CMakeFiles/tjit_objects.dir/src/runtime/cache.c.o" "gcc" "CMakeFiles/tjit_objects.dir/src/runtime/cache.c.o.d"
  "/work/main/src/runtime/ctx.c" "CMakeFiles/tjit_objects.dir/src/runtime/ctx.c.o" "gcc" "CMakeFiles/tjit_objects.dir/src/runtime/ctx.c.o.d"
  "/work/main/src/runtime/dump.c" "CMakeFiles/tjit_objects.dir/src/runtime/dump.c.o" "gcc" "CMakeFiles/tjit_objects.dir/src/runtime/dump.c.o.d"
  "/work/main/src/runtime/error.c" "CMakeFiles/tjit_objects.dir/src/runtime/error.c.o" "gcc" "CMakeFiles/tjit_objects.dir/src/runtime/error.c.o.d"
  "/work/main/src/runtime/fn.c" "CMakeFiles/tjit_objects.dir/src/runtime/fn.c.o" "gcc" "CMakeFiles/tjit_objects.dir/src/runtime/fn.c.o.d"
  "/work/main/src/runtime/mesh.c" "CMakeFiles/tjit_objects.dir/src/runtime/mesh.c.o" "gcc" "CMakeFiles/tjit_objects.dir/src/runtime/mesh.c.o.d"
  "/work/main/src/trace/ops_elementwise.c" "CMakeFiles/tjit_objects.dir/src/trace/ops_elementwise.c.o" "gcc" "CMakeFiles/tjit_objects.dir/src/trace/ops_elementwise.c.o.d"
  "/work/main/src/trace/ops_reduce_dot.c" "CMakeFiles/tjit_objects.dir/src/trace/ops_reduce_dot.c.o" "gcc" "CMakeFiles/tjit_objects.dir/src/trace/ops_reduce_dot.c.o.d"
  "/work/main/src/trace/ops_shape.c" "CMakeFiles/tjit_objects.dir/src/trace/ops_shape.c.o" "gcc" "CMakeFiles/tjit_objects.dir/src/trace/ops_shape.c.o.d"
  "/work/main/src/trace/trace.c" "CMakeFiles/tjit_objects.dir/src/trace/trace.c.o" "gcc" "CMakeFiles/tjit_objects.dir/src/trace/trace.c.o.d"
  "/work/main/src/trace/transform.c" "CMakeFiles/tjit_objects.dir/src/trace/transform.c.o" "gcc" "CMakeFiles/tjit_objects.dir/src/trace/transform.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
