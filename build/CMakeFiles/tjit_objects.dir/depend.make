# Empty dependencies file for tjit_objects.
# This may be replaced when dependencies are built.
