# Empty custom commands generated dependencies file for acc_gen.
# This may be replaced when dependencies are built.
