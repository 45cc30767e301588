CMakeFiles/tjit-opt.dir/tools/tjit-opt.c.o: /work/main/tools/tjit-opt.c \
 /usr/include/stdc-predef.h
