# Empty custom commands generated dependencies file for intrinsics_gen.
# This may be replaced when dependencies are built.
