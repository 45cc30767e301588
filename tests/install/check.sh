#!/bin/sh
# check.sh BUILD_DIR SOURCE_DIR: installs tjit into a temporary prefix and builds a consumer
# program against it twice, through pkg-config and through CMake's find_package.
set -eu
build=$1
src=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
pcdir=$(dirname "$(find "$prefix" -name tjit.pc | head -n 1)")
export PKG_CONFIG_PATH="$pcdir"
cc -std=c11 -Wall -Werror "$src/tests/install/consumer.c" $(pkg-config --cflags --libs tjit) \
  -o "$prefix/consumer_pc"
"$prefix/consumer_pc"
echo "pkg-config consumer: ok"
cmake -S "$src/tests/install" -B "$prefix/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/cmake-build" >/dev/null
"$prefix/cmake-build/consumer"
echo "find_package consumer: ok"
