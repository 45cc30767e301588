file(REMOVE_RECURSE
  "CMakeFiles/tjit-opt.dir/tools/tjit-opt.c.o"
  "CMakeFiles/tjit-opt.dir/tools/tjit-opt.c.o.d"
  "tjit-opt"
  "tjit-opt.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/tjit-opt.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
