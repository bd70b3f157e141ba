// The shared main of every test binary: doctest's own, plus the guard of Note [A filter that
// matches nothing].
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>

namespace {

// Note [A filter that matches nothing]: CTest runs each test case as `test_<layer>
// --test-case=<name>` (doctest_discover_tests), and doctest passes a run whose filter matches no
// test case at all. Discovery reads the list of names as a CMake list, so a ';' in a name cuts it in
// two, and each half became a CTest test that ran nothing and passed (eight such names were found).
// So a run given --test-case in which no test case passed the filters fails, naming the filter.
unsigned g_selected = 0;
bool g_ran = false;

struct SelectedCount : doctest::IReporter {
  explicit SelectedCount(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& stats) override {
    g_selected = stats.numTestCasesPassingFilters;
    g_ran = true;
  }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_LISTENER("selected_count", 1, SelectedCount);

// The value of --test-case=/-tc= in argv, or nullptr.
const char* test_case_filter(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    for (const char* flag : {"--test-case=", "-tc="}) {
      if (std::strncmp(argv[i], flag, std::strlen(flag)) == 0) return argv[i] + std::strlen(flag);
    }
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int rc = context.run();
  const char* filter = test_case_filter(argc, argv);
  if (rc == 0 && g_ran && filter != nullptr && g_selected == 0) {
    std::fprintf(stderr, "no test case matches --test-case=%s (a test name with ';' is cut in two by CTest's "
                 "test discovery; Note [A filter that matches nothing], tests/main.cpp)\n", filter);
    return 1;
  }
  return rc;
}
