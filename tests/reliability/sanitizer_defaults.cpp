// Default options of the sanitizer runtimes, linked into every executable of a
// -DSTREAMKNN_SANITIZE=... build (top-level CMakeLists.txt), so that ctest, a test binary run
// by hand and CI all run with the same settings. Variables in the environment (TSAN_OPTIONS,
// ASAN_OPTIONS, UBSAN_OPTIONS) still override them. See docs/reliability.md.
//
// * allocator_may_return_null=1: malloc and the nothrow operator new return null on a request
//   they cannot satisfy, as without a sanitizer. (A throwing operator new still ends the
//   process under a sanitizer, so the tests of allocations that must fail skip themselves
//   there; see tests/reliability/reliability_support.hpp.)
// * No ThreadSanitizer suppressions: every race report is a failure.

extern "C" {

const char* __tsan_default_options() {
  return "halt_on_error=0:second_deadlock_stack=1:allocator_may_return_null=1:report_signal_unsafe=0";
}

const char* __asan_default_options() {
  return "allocator_may_return_null=1:detect_leaks=1:check_initialization_order=1:strict_init_order=1:"
         "detect_stack_use_after_return=1";
}

const char* __ubsan_default_options() { return "print_stacktrace=1:halt_on_error=1"; }

}  // extern "C"
