
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/src/ir/arena.c" "CMakeFiles/tjit_objects.dir/src/ir/arena.c.o" "gcc" "CMakeFiles/tjit_objects.dir/src/ir/arena.c.o.d"
  "/work/main/src/ir/ir.c" "CMakeFiles/tjit_objects.dir/src/ir/ir.c.o" "gcc" "CMakeFiles/tjit_objects.dir/src/ir/ir.c.o.d"
  "/work/main/src/runtime/error.c" "CMakeFiles/tjit_objects.dir/src/runtime/error.c.o" "gcc" "CMakeFiles/tjit_objects.dir/src/runtime/error.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
