#!/bin/sh
# run_golden.sh: runs every golden IR test (*.tir) in DIR through tjit-opt and compares the output.
# usage: run_golden.sh TJIT_OPT DIR   (TJIT_GOLDEN_UPDATE=1 rewrites the expected blocks in place)
#
# A .tir file: first line "# RUN: tjit-opt ARGS"; the input is every line before "# EXPECT:"
# (expects exit 0 and this stdout) or "# EXPECT-ERROR:" (expects a non-zero exit and this
# stderr); the expected lines follow with their leading "# " removed ("#" alone: empty line).
# The input goes to tjit-opt on stdin, so error messages read "<stdin>:LINE:COL: ...".

if [ $# -ne 2 ]; then
  echo "usage: $0 TJIT_OPT DIR" >&2
  exit 2
fi
opt=$1
dir=$2
if [ ! -x "$opt" ]; then
  echo "run_golden.sh: '$opt' is not an executable" >&2
  exit 2
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tjit-golden.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
trap 'rm -rf "$tmp"; exit 130' INT TERM

passed=0
failed=0

for file in "$dir"/*.tir; do
  [ -e "$file" ] || continue
  name=$(basename "$file")
  first=$(sed -n '1p' "$file")
  case $first in
    "# RUN: tjit-opt"*) args=${first#"# RUN: tjit-opt"} ;;
    *)
      echo "FAIL $name: the first line must be '# RUN: tjit-opt ARGS'"
      failed=$((failed + 1))
      continue
      ;;
  esac
  if grep -q '^# EXPECT-ERROR:$' "$file"; then
    mode=error
  elif grep -q '^# EXPECT:$' "$file"; then
    mode=ok
  else
    echo "FAIL $name: no '# EXPECT:' or '# EXPECT-ERROR:' line"
    failed=$((failed + 1))
    continue
  fi

  : >"$tmp/input"
  : >"$tmp/expected"
  awk -v input="$tmp/input" -v expected="$tmp/expected" '
    !seen && ($0 == "# EXPECT:" || $0 == "# EXPECT-ERROR:") { seen = 1; next }
    !seen { print > input; next }
    $0 == "#" { print "" > expected; next }
    substr($0, 1, 2) == "# " { print substr($0, 3) > expected; next }
    { print > expected }
  ' "$file"

  set -f # ARGS are split on spaces but never globbed
  # shellcheck disable=SC2086
  "$opt" $args <"$tmp/input" >"$tmp/stdout" 2>"$tmp/stderr"
  status=$?
  set +f

  if [ "$mode" = error ]; then
    cp "$tmp/stderr" "$tmp/actual"
  else
    cp "$tmp/stdout" "$tmp/actual"
  fi

  if [ -n "$TJIT_GOLDEN_UPDATE" ] && [ "$TJIT_GOLDEN_UPDATE" != 0 ]; then
    {
      cat "$tmp/input"
      if [ "$mode" = error ]; then echo "# EXPECT-ERROR:"; else echo "# EXPECT:"; fi
      sed -e 's/^/# /' -e 's/^# $/#/' "$tmp/actual"
    } >"$tmp/updated"
    if ! cmp -s "$tmp/updated" "$file"; then
      cp "$tmp/updated" "$file"
      echo "updated $name"
    fi
    cp "$tmp/actual" "$tmp/expected"
  fi

  ok=1
  if [ "$mode" = error ] && [ "$status" -eq 0 ]; then
    echo "FAIL $name: expected tjit-opt to fail, it exited 0"
    ok=0
  elif [ "$mode" = ok ] && [ "$status" -ne 0 ]; then
    echo "FAIL $name: tjit-opt exited $status:"
    sed 's/^/  /' "$tmp/stderr"
    ok=0
  fi
  if ! (cd "$tmp" && diff -u expected actual >diff); then
    [ "$ok" = 1 ] && echo "FAIL $name: output differs"
    cat "$tmp/diff"
    ok=0
  fi
  if [ "$ok" = 1 ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
