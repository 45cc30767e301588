file(REMOVE_RECURSE
  "CMakeFiles/tjit_objects.dir/src/ir/arena.c.o"
  "CMakeFiles/tjit_objects.dir/src/ir/arena.c.o.d"
  "CMakeFiles/tjit_objects.dir/src/ir/ir.c.o"
  "CMakeFiles/tjit_objects.dir/src/ir/ir.c.o.d"
  "CMakeFiles/tjit_objects.dir/src/runtime/error.c.o"
  "CMakeFiles/tjit_objects.dir/src/runtime/error.c.o.d"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/tjit_objects.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
