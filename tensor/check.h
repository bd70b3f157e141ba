// Errors. MT_CHECK(cond, parts...) throws mt::Error with the file, line and a message built from
// `parts` (streamed, so numbers and shapes can be mixed in). Library code never calls exit():
// applications catch mt::Error at the top and print one line.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace mt {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
// Builds "<parts> (file:line)" and throws it as E (mt::Error or a subclass such as
// mt::dist::TimeoutError), so every error message in the project has one format.
template <typename E, typename... Parts>
[[noreturn]] void fail_with(const char* file, int line, const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  os << " (" << file << ":" << line << ")";
  throw E(os.str());
}
template <typename... Parts>
[[noreturn]] void fail(const char* file, int line, const Parts&... parts) {
  fail_with<Error>(file, line, parts...);
}
}  // namespace detail

}  // namespace mt

#define MT_CHECK(cond, ...)                                   \
  do {                                                        \
    if (!(cond)) [[unlikely]]                                 \
      ::mt::detail::fail(__FILE__, __LINE__, __VA_ARGS__);    \
  } while (0)

#define MT_FAIL(...) ::mt::detail::fail(__FILE__, __LINE__, __VA_ARGS__)
