# What the end-to-end scripts of mini_train share (mini_train_test.sh, trainer_test.sh): sourced
# after `bin` (the mini_train binary) is set and the script has moved into its temp folder.

fail() { echo "FAIL: $*" >&2; exit 1; }
# In sanitizer builds: OpenMPI's own allocations still held at exit (its dlopen'ed components) are
# reported by LeakSanitizer as leaks of the rank; they are not ours, and their stacks name no module
# a suppression could match. Leak checks go off for MPI ranks; AddressSanitizer's checks stay on.
mpi_leaks_are_not_ours() { export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"; }

# Runs mini_train expecting failure: exactly one line on stderr containing $1, non-zero exit.
expect_error() {
  local want=$1
  shift
  "$bin" "$@" >out.txt 2>err.txt && fail "mini_train $* succeeded; expected an error with '$want'"
  [[ $(wc -l <err.txt) -eq 1 ]] || { cat err.txt >&2; fail "mini_train $*: expected one error line"; }
  grep -qF -- "$want" err.txt || { cat err.txt >&2; fail "mini_train $*: error does not mention '$want'"; }
  [[ ! -e final_model.safetensors ]] || fail "mini_train $*: left a model file behind after an error"
}
