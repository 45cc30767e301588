# Empty custom commands generated dependencies file for omp_gen.
# This may be replaced when dependencies are built.
