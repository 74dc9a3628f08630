#!/usr/bin/env bash
# The stages' include roots enforce the pipeline's order: a stage compiles against the headers
# of the stages before it, and an include of a later (or unrelated) stage fails. Each pair is
# "stage header": the header must compile with the stage's root when `ok`, and fail as "No such
# file" when `no`.
set -uo pipefail
cxx=$1 roots=$2 src=$3
fail=0
check() {  # expect stage header
  local expect=$1 stage=$2 header=$3 out
  out=$(printf '#include "%s"\n' "$header" | "$cxx" -std=c++20 -fsyntax-only -I"$roots/$stage" -I"$src/include" \
        -I"$roots/../generated" -x c++ - 2>&1)
  local rc=$?
  if [ "$expect" = ok ] && [ $rc -ne 0 ]; then
    echo "FAIL: $stage should see $header:"; echo "$out" | head -3; fail=1
  elif [ "$expect" = no ] && { [ $rc -eq 0 ] || ! grep -q "No such file" <<<"$out"; }; then
    echo "FAIL: $stage must not see $header (rc $rc)"; echo "$out" | head -3; fail=1
  else
    echo "ok: $stage $( [ "$expect" = ok ] && echo sees || echo 'does not see') $header"
  fi
}
check ok target target/vm.hpp
check no target native/unwind_table.hpp
check no target run/session.hpp
check ok native native/function_search.hpp
check no native symbols/symbolizer.hpp
check no profile target/vm.hpp
check ok report report/report.hpp
check no report inspect/processes.hpp
check no inspect sampling/sampler.hpp
check no sampling symbols/symbolizer.hpp
check ok run run/session.hpp
check no run find/find_vm.hpp
check ok find target/discovery.hpp
check ok symbols symbols/jit_symfile.hpp
check no target symbols/jit_symfile.hpp
check ok inspect inspect/term_size.hpp
check no report inspect/term_size.hpp
exit $fail
