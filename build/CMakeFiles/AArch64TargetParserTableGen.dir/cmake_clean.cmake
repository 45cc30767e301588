
# Per-language clean rules from dependency scanning.
foreach(lang )
  include(CMakeFiles/AArch64TargetParserTableGen.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
